package main

import (
	"fmt"
	"os"
	"testing"
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
	os.Exit(m.Run())
}
