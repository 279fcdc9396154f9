package testkit

import (
	"io"
	"log/slog"
	"sync"
	"testing"
)

// Logger returns a logger that writes into t's output (shown when the test fails or runs
// with -v), at level Debug, so a failing test shows what the code under test said. Once
// the test's cleanup reaches the logger, what it is given is dropped: a goroutine that
// outlives the test may still log, and the testing package forbids writing to a finished
// test. Cleanups run last registered first: make the logger before what logs to it, and
// what it says while stopping is kept.
func Logger(t testing.TB) *slog.Logger {
	t.Helper()
	w := &testWriter{out: t.Output()}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testWriter writes into a test's output until it is closed.
type testWriter struct {
	mu     sync.Mutex
	out    io.Writer
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return len(p), nil
	}
	return w.out.Write(p)
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}
