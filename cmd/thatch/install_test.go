package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/commands"
)

// thatch install replaces a shim token that is short, or that other accounts can read,
// with a new random one of mode 0600, lists the token among its changes and logs why; a
// second install leaves the new token alone.
func TestInstallRepairsShimToken(t *testing.T) {
	for _, c := range []struct {
		name, old string
		mode      os.FileMode
		why       string
	}{
		{"short", "a1b2c3\n", 0o600, "6 characters, fewer than 32"},
		{"world-readable", strings.Repeat("0123456789abcdef", 3) + "\n", 0o644, "mode 0644: readable by other accounts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := cliConfig(t)
			cfg.OpencodeDir = t.TempDir()
			path := filepath.Join(cfg.DataDir, "shim.token")
			if err := os.WriteFile(path, []byte(c.old), c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, c.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			var logs bytes.Buffer
			changes, err := daemon.Install(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil || !slices.Contains(changes, commands.Change{Path: path}) {
				t.Fatalf("install: %+v, %v; want the token among the changes", changes, err)
			}
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("the token file after install: %v %v, want mode 0600", fi.Mode(), err)
			}
			data, _ := os.ReadFile(path)
			tok := strings.TrimSpace(string(data))
			if len(tok) < commands.MinTokenLen || tok == strings.TrimSpace(c.old) {
				t.Fatalf("the token after install is %q, want a new one of %d characters or more", tok, commands.MinTokenLen)
			}
			if !strings.Contains(logs.String(), `msg="replaced the plugin shim's token: the old one was unsafe"`) ||
				!strings.Contains(logs.String(), c.why) {
				t.Fatalf("install logged:\n%s\nwant the token's replacement, saying %q", logs.String(), c.why)
			}
			plugin, _ := os.ReadFile(filepath.Join(cfg.OpencodeDir, "plugin", "thatch.js"))
			if !strings.Contains(string(plugin), path) {
				t.Fatal("the plugin does not read the repaired token file")
			}
			changes, err = daemon.Install(cfg, nil)
			if err != nil || len(changes) != 0 {
				t.Fatalf("a second install changed %+v (%v), want nothing", changes, err)
			}
			if again, _ := os.ReadFile(path); string(again) != string(data) {
				t.Fatal("a second install replaced a sound token")
			}
		})
	}
}

// The stream's bounds default to 1 GiB and 1 MiB + 64 KiB; a value the bridge's events
// would not fit, or too small to hold a history, is refused naming the variable.
func TestStreamBoundsConfig(t *testing.T) {
	c, err := daemon.LoadConfig()
	if err != nil || c.StreamMaxBytes != 1<<30 || c.StreamMaxMsgBytes != 1<<20+64<<10 {
		t.Fatalf("defaults: %d, %d (%v)", c.StreamMaxBytes, c.StreamMaxMsgBytes, err)
	}
	for _, bad := range []struct{ name, value string }{
		{"THATCH_STREAM_MAX_MSG_BYTES", "65536"},
		{"THATCH_STREAM_MAX_MSG_BYTES", "134217728"},
		{"THATCH_STREAM_MAX_BYTES", "1048576"},
		{"THATCH_STREAM_MAX_BYTES", "-1"},
	} {
		t.Run(bad.name+"="+bad.value, func(t *testing.T) {
			t.Setenv(bad.name, bad.value)
			if _, err := daemon.LoadConfig(); err == nil || !strings.HasPrefix(err.Error(), bad.name+"="+bad.value+": must be") {
				t.Fatalf("%v, want an error naming %s and what it accepts", err, bad.name)
			}
		})
	}
	t.Setenv("THATCH_STREAM_MAX_BYTES", "104857600")
	t.Setenv("THATCH_STREAM_MAX_MSG_BYTES", "2097152")
	if c, err := daemon.LoadConfig(); err != nil || c.StreamMaxBytes != 100<<20 || c.StreamMaxMsgBytes != 2<<20 {
		t.Fatalf("set: %d, %d (%v)", c.StreamMaxBytes, c.StreamMaxMsgBytes, err)
	}
}
