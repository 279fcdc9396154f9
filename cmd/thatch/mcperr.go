package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// mcpDialError is what thatch mcp says when it cannot connect to thatch: the cause first.
// A broker that refuses the token runs (thatch is running): the data folder or the token
// is not that thatch's.
func mcpDialError(c daemon.Config, err error) error {
	if errors.Is(err, nats.ErrAuthorization) || strings.Contains(err.Error(), nats.ErrAuthorization.Error()) {
		return fmt.Errorf("thatch runs but refused thatch mcp's token: set THATCH_DATA_DIR to the data folder of the thatch you run, "+
			"or THATCH_NATS_TOKEN to its token. %w", err)
	}
	return fmt.Errorf("thatch is not running, or thatch mcp cannot reach it: start it with `thatch serve`. %w", err)
}
