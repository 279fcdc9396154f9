package daemon

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"

	"github.com/thatch-dev/thatch/commands"
)

// Install writes the slash commands and the plugin shim into opencode's config folder, as
// thatch serve does at start (InstallWith, with SkipTaken): a plugin that the running
// thatch of another data folder owns is left to it, with a warning naming that folder.
func Install(c Config, log *slog.Logger) ([]commands.Change, error) {
	in, err := InstallWith(c, log, InstallOptions{SkipTaken: true})
	return in.Changes, err
}

// InstallOptions say what an install does with a plugin that another data folder owns
// (its token file is that folder's) while that folder's thatch is running.
type InstallOptions struct {
	Force     bool // take it over (thatch install --force)
	SkipTaken bool // install the slash commands and leave the plugin alone, warning
}

// Installed is what an install did.
type Installed struct {
	Changes []commands.Change
	// From is the other data folder whose plugin this install took over, FromRunning
	// whether its thatch was running (--force); "" when the plugin was this folder's or
	// absent.
	From        string
	FromRunning bool
	// Skipped says the plugin was left to the running thatch of Owner (SkipTaken).
	Skipped bool
	Owner   string
}

// PluginTakenError refuses to repoint the plugin of another data folder's running thatch.
type PluginTakenError struct {
	Plugin, Owner, DataDir string
}

func (e *PluginTakenError) Error() string {
	return fmt.Sprintf("the plugin %s belongs to the thatch of the data folder %s, which is running: installing it for %s would point opencode at this data folder's "+
		"thatch instead (its token and port), and the running one would lose its tools; stop that thatch first, or run thatch install --force to take the plugin over",
		e.Plugin, e.Owner, e.DataDir)
}

// InstallWith writes the slash commands and the plugin shim into opencode's config
// folder, after making sure the shim's token is sound (shimToken), logging what changed
// when log is set. A token it had to repair is listed among the changes. A plugin of
// another data folder (pluginOwner) is taken over when that folder's thatch is not
// running, or with o.Force; else the install is refused (*PluginTakenError) before it
// writes anything, or, with o.SkipTaken, writes the slash commands alone.
func InstallWith(c Config, log *slog.Logger, o InstallOptions) (Installed, error) {
	var in Installed
	if c.OpencodeDir == "" {
		return in, fmt.Errorf("no opencode config folder: set XDG_CONFIG_HOME or HOME")
	}
	pluginPath := filepath.Join(c.OpencodeDir, "plugin", "thatch.js")
	if owner := pluginOwner(pluginPath); owner != "" && !sameDir(owner, c.DataDir) {
		running, err := Running(owner)
		if err != nil {
			return in, err
		}
		switch {
		case running && o.Force:
			in.From, in.FromRunning = owner, true
		case running && o.SkipTaken:
			in.Skipped, in.Owner = true, owner
		case running:
			return in, &PluginTakenError{Plugin: pluginPath, Owner: owner, DataDir: c.DataDir}
		default:
			in.From = owner
		}
	}
	files := commands.Files()
	var tokenChange []commands.Change
	plugin := commands.File{}
	if !in.Skipped {
		tokenFile, repaired, err := ensureShimToken(c.DataDir, log)
		if err != nil {
			return in, err
		}
		if repaired {
			tokenChange = append(tokenChange, commands.Change{Path: tokenFile})
		}
		plugin = commands.Plugin("http://"+c.ShimListen, tokenFile)
		files = append(files, plugin)
	} else if log != nil {
		log.Warn("left opencode's plugin to the running thatch of another data folder: this thatch's tools are not in opencode; "+
			"stop that thatch and restart this one, or run thatch install --force to take the plugin over", "plugin", pluginPath, "owner", in.Owner)
	}
	installed, err := commands.Install(c.OpencodeDir, files)
	if log != nil {
		for _, ch := range installed {
			what := "installed slash command"
			if plugin.Path != "" && ch.Path == filepath.Join(c.OpencodeDir, plugin.Path) {
				what = "installed plugin"
				if in.From != "" {
					log.Info("took the plugin over from another data folder's thatch", "path", ch.Path, "from", in.From, "running", in.FromRunning)
				}
			}
			log.Info(what, "path", ch.Path, "created", ch.Created)
		}
	}
	in.Changes = append(tokenChange, installed...)
	return in, err
}

// pluginTokenFile finds the token file an installed plugin reads (commands.Plugin writes
// it as a JSON string).
var pluginTokenFile = regexp.MustCompile(`(?m)^const TOKEN_FILE = ("(?:[^"\\]|\\.)*")`)

// pluginOwner is the data folder whose thatch the installed plugin at path talks to: the
// folder of the token file it reads; "" when there is no plugin or it names none.
func pluginOwner(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	m := pluginTokenFile.FindSubmatch(data)
	var tokenFile string
	if m == nil || json.Unmarshal(m[1], &tokenFile) != nil || tokenFile == "" {
		return ""
	}
	return filepath.Dir(tokenFile)
}

// sameDir tells whether a and b name one folder, through symbolic links.
func sameDir(a, b string) bool {
	canon := func(p string) string {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Clean(p)
	}
	return canon(a) == canon(b)
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
