//go:build !linux

package claudecode

import "syscall"

// childAttr: only Linux can tie a child's life to thatch's; elsewhere a child of a thatch
// killed outright runs to its end, and the next thatch ends its session.
func childAttr() *syscall.SysProcAttr { return nil }

// processAlive: elsewhere thatch does not wait for a session's process.
func processAlive(int) bool { return false }
