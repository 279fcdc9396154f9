package daemontest

import (
	"bytes"
	"sync"
)

// SyncBuf is a log sink shared by the daemon's goroutines.
type SyncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }

// Bytes is a copy of what was written so far.
func (s *SyncBuf) Bytes() []byte { s.mu.Lock(); defer s.mu.Unlock(); return bytes.Clone(s.b.Bytes()) }
