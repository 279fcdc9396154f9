package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
)

// Below is where Port looks: under Linux's ephemeral range (32768–60999 by default). A
// port the kernel hands out for "127.0.0.1:0" comes from that range, as does the source
// port of every outgoing connection: under go test's parallel packages, a server started
// on such a port a moment later found it taken and never became ready.
const (
	low  = 20000
	high = 32000
)

// Port is a loopback TCP port free at the time of the call, outside the ephemeral range.
func Port() (int, error) {
	for range 200 {
		p := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			return 0, err
		}
		return p, nil
	}
	return 0, fmt.Errorf("no free loopback port in %d–%d", low, high-1)
}
