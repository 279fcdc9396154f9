package freeport

import (
	"fmt"
	"net"
	"testing"
)

// A port Port gives is below the ephemeral range, and a server can listen on it.
func TestPortIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	for range 20 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p < low || p >= high {
			t.Fatalf("port %d, want one in %d–%d", p, low, high-1)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("listen on port %d: %v", p, err)
		}
		l.Close()
	}
}
