package daemon

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/thatch-dev/thatch/commands"
)

// Install writes the slash commands and the plugin shim into opencode's config folder,
// after making sure the shim's token is sound (shimToken), logging what changed when log
// is set. A token it had to repair is listed among the changes.
func Install(c Config, log *slog.Logger) ([]commands.Change, error) {
	if c.OpencodeDir == "" {
		return nil, fmt.Errorf("no opencode config folder: set XDG_CONFIG_HOME or HOME")
	}
	tokenFile, repaired, err := ensureShimToken(c.DataDir, log)
	if err != nil {
		return nil, err
	}
	var changes []commands.Change
	if repaired {
		changes = append(changes, commands.Change{Path: tokenFile})
	}
	plugin := commands.Plugin("http://"+c.ShimListen, tokenFile)
	installed, err := commands.Install(c.OpencodeDir, append(commands.Files(), plugin))
	if log != nil {
		for _, ch := range installed {
			what := "installed slash command"
			if ch.Path == filepath.Join(c.OpencodeDir, plugin.Path) {
				what = "installed plugin"
			}
			log.Info(what, "path", ch.Path, "created", ch.Created)
		}
	}
	return append(changes, installed...), err
}

// ensureShimToken returns the file holding the token the plugin shim presents to the
// bridge, creating it, or replacing an unsafe one, by commands.EnsureToken's rule (the
// bridge calls it when it starts, as thatch install does), logging a repair when log is set. repaired reports that
// an existing token was replaced or made private.
func ensureShimToken(dataDir string, log *slog.Logger) (path string, repaired bool, err error) {
	path = filepath.Join(dataDir, "shim.token")
	action, why, err := commands.EnsureToken(path)
	if err != nil {
		return "", false, err
	}
	if log != nil {
		switch action {
		case commands.TokenReplaced:
			log.Warn("replaced the plugin shim's token: the old one was unsafe", "path", path, "reason", why)
		case commands.TokenMadePrivate:
			log.Info("made the plugin shim's token private (mode 0600)", "path", path, "was", why)
		case commands.TokenCreated:
			log.Info("created the plugin shim's token", "path", path)
		}
	}
	return path, action == commands.TokenReplaced || action == commands.TokenMadePrivate, nil
}
