package claudecode

import (
	"os"
	"strconv"
	"syscall"
)

// childAttr makes a child die with thatch: a thatch killed outright (SIGKILL, a crash)
// leaves no headless claude behind. The responder of the next thatch ends its session.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

// processAlive says whether process pid still runs (or awaits its parent's wait).
func processAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}
