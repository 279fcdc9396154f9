package natsbus

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// A memory tool whose write finds the disk full says so first (issue 29, point 6); another
// store failure keeps its own message.
func TestStoreErrorNamesAFullDisk(t *testing.T) {
	full := storeError(fmt.Errorf("remember: %w", &os.PathError{Op: "write", Path: "/data/memories.db-wal", Err: syscall.ENOSPC}))
	if !strings.HasPrefix(full.Message, "disk full: free space in thatch's data folder") {
		t.Errorf("full disk: %q", full.Message)
	}
	other := storeError(fmt.Errorf("remember: %w", &os.PathError{Op: "write", Path: "/data/memories.db-wal", Err: syscall.EIO}))
	if strings.Contains(other.Message, "disk full") {
		t.Errorf("an I/O error said the disk is full: %q", other.Message)
	}
}
