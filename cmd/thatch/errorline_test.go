package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// TestErrorLine: a command's error is printed once prefixed with "thatch: ", never
// "thatch: thatch is not running" (thatch sessions, thatch memories with thatch down).
func TestErrorLine(t *testing.T) {
	c, err := daemon.LoadConfig()
	must(t, err)
	c.DataDir = t.TempDir()
	for _, cmd := range []string{"sessions", "memories"} {
		err := client(context.Background(), c, cmd, nil, &bytes.Buffer{})
		if err == nil {
			t.Fatalf("thatch %s without thatch succeeded", cmd)
		}
		if line := errorLine(err); !strings.HasPrefix(line, "thatch is not running") {
			t.Errorf("thatch %s without thatch prints %q", cmd, line)
		}
	}
	if line := errorLine(errors.New("flag provided but not defined: -x")); line != "thatch: flag provided but not defined: -x" {
		t.Errorf("another error prints %q", line)
	}
}
