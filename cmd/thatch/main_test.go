package main

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain lets the test binary stand in for thatch as the benchmark's rehydrate child.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "bench-rehydrate" {
		if err := benchRehydrate(os.Args[2], "", os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Every goroutine serve and the test brokers start must be gone when the tests end.
	goleak.VerifyTestMain(m)
}
