package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/thatch-dev/thatch/commands"
)

// install writes the slash commands and the plugin shim into opencode's config folder,
// logging what changed when log is set.
func install(c Config, log *slog.Logger) ([]commands.Change, error) {
	if c.OpencodeDir == "" {
		return nil, fmt.Errorf("no opencode config folder: set XDG_CONFIG_HOME or HOME")
	}
	tokenFile, err := shimToken(c.DataDir)
	if err != nil {
		return nil, err
	}
	plugin := commands.Plugin("http://"+c.ShimListen, tokenFile)
	changes, err := commands.Install(c.OpencodeDir, append(commands.Files(), plugin))
	if log != nil {
		for _, ch := range changes {
			what := "installed slash command"
			if ch.Path == filepath.Join(c.OpencodeDir, plugin.Path) {
				what = "installed plugin"
			}
			log.Info(what, "path", ch.Path, "created", ch.Created)
		}
	}
	return changes, err
}

// shimToken returns the file holding the token the plugin shim presents to the bridge,
// creating it (private to its user) when absent.
func shimToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "shim.token")
	if data, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(data))) > 0 {
		return path, nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("create data folder: %w", err)
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(hex.EncodeToString(b[:])+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the shim token: %w", err)
	}
	return path, nil
}
