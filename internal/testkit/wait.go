package testkit

import (
	"testing"
	"time"
)

// Condition is what WaitFor polls: a func() bool that reports whether it holds, or a
// func() error that returns nil once it holds and otherwise the reason it does not yet.
type Condition interface {
	func() bool | func() error
}

// maxPoll bounds the interval between two polls of a condition.
const maxPoll = 20 * time.Millisecond

// WaitFor polls cond, at first at once and then at intervals growing from 0.1 to 20 ms,
// until it holds, and fails the test (t.Fatalf, so from the test's goroutine) when it
// still does not after timeout, naming what it waited for and, for a func() error, the
// last reason. Give a generous timeout: the machines that run the tests are often loaded,
// and a condition that holds returns at once whatever the timeout.
func WaitFor[C Condition](t testing.TB, timeout time.Duration, what string, cond C) {
	t.Helper()
	check := func() error {
		switch c := any(cond).(type) {
		case func() error:
			return c()
		case func() bool:
			if c() {
				return nil
			}
			return errNotYet
		}
		panic("unreachable")
	}
	deadline := time.Now().Add(timeout)
	interval := 100 * time.Microsecond
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("waited %v for %s", timeout, what)
			} else {
				t.Fatalf("waited %v for %s: %v", timeout, what, err)
			}
			return
		}
		time.Sleep(interval)
		interval = min(2*interval, maxPoll)
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
