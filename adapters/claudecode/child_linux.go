package claudecode

import "syscall"

// childAttr makes a child die with thatch: a thatch killed outright (SIGKILL, a crash)
// leaves no headless claude behind. The responder of the next thatch ends its session.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
