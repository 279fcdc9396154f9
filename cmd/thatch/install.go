package main

import (
	"fmt"
	"log/slog"

	"github.com/thatch-dev/thatch/commands"
)

// install writes the command files into opencode's config folder, logging what changed
// when log is set.
func install(c Config, log *slog.Logger) ([]commands.Change, error) {
	if c.OpencodeDir == "" {
		return nil, fmt.Errorf("no opencode config folder: set XDG_CONFIG_HOME or HOME")
	}
	changes, err := commands.Install(c.OpencodeDir, commands.Files())
	if log != nil {
		for _, ch := range changes {
			log.Info("installed slash command", "path", ch.Path, "created", ch.Created)
		}
	}
	return changes, err
}
