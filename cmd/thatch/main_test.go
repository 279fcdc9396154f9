package main

import (
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The tests start from thatch's defaults, whatever the developer's shell exports: a
	// THATCH_NATS_URL or THATCH_LOG_LEVEL of theirs would change what the tests see. The
	// tests' own switches (THATCH_E2E_*, THATCH_TEST_*) stay.
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "THATCH_") && !strings.HasPrefix(k, "THATCH_E2E_") && !strings.HasPrefix(k, "THATCH_TEST_")) || k == "OPENCODE_SERVER_PASSWORD" {
			os.Unsetenv(k)
		}
	}
	// The operator's endpoint is off unless a test turns it on at an address of its own:
	// the daemons the tests start at once would all want 127.0.0.1:4224.
	os.Setenv("THATCH_HTTP_LISTEN", "off")
	// Every goroutine serve and the test brokers start must be gone when the tests end.
	goleak.VerifyTestMain(m)
}
