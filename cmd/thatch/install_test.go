package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/commands"
	"github.com/thatch-dev/thatch/internal/testkit"
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

// TestInstallLeavesAnotherRunningThatchsPlugin: with the plugin installed by the running
// thatch of data folder A, thatch install for data folder B refuses, naming A and
// --force, and changes nothing; thatch serve on B leaves the plugin to A with a warning
// naming it; --force takes it over and says so; a stopped thatch's plugin is taken over
// and said so; the same folder's install is as before.
func TestInstallLeavesAnotherRunningThatchsPlugin(t *testing.T) {
	ctx := context.Background()
	oc := t.TempDir()
	pluginPath := filepath.Join(oc, "plugin", "thatch.js")
	plugin := func() string {
		data, err := os.ReadFile(pluginPath)
		must(t, err)
		return string(data)
	}
	tokenOf := func(c daemon.Config) string {
		data, _ := json.Marshal(filepath.Join(c.DataDir, "shim.token"))
		return "const TOKEN_FILE = " + string(data) + "\n"
	}
	a, b := embeddedConfig(t), embeddedConfig(t)
	a.OpencodeDir, b.OpencodeDir = oc, oc
	a.InstallCommands, b.InstallCommands = true, true
	stopA := startServe(t, a, testkit.Logger(t))
	if !strings.Contains(plugin(), tokenOf(a)) {
		t.Fatalf("thatch serve on %s did not install its plugin:\n%s", a.DataDir, plugin())
	}
	installedByA := plugin()

	var out bytes.Buffer
	err := client(ctx, b, "install", nil, &out)
	if err == nil || !strings.Contains(err.Error(), "belongs to the thatch of the data folder "+a.DataDir+", which is running") ||
		!strings.Contains(err.Error(), "thatch install --force") {
		t.Fatalf("thatch install for %s while %s runs: %v\n%s; want a refusal naming %s and --force", b.DataDir, a.DataDir, err, out.String(), a.DataDir)
	}
	if plugin() != installedByA {
		t.Fatal("a refused install changed the plugin")
	}

	logs := &syncBuf{}
	stopB := startServe(t, b, slog.New(slog.NewTextHandler(logs, nil)))
	stopB()
	if plugin() != installedByA {
		t.Fatal("thatch serve on another data folder took the running thatch's plugin")
	}
	if text := string(logs.Bytes()); !strings.Contains(text, "level=WARN msg=\"left opencode's plugin to the running thatch of another data folder") ||
		!strings.Contains(text, "owner="+a.DataDir) {
		t.Fatalf("thatch serve on %s logged:\n%s\nwant a warning naming %s", b.DataDir, text, a.DataDir)
	}

	out.Reset()
	must(t, client(ctx, b, "install", []string{"--force"}, &out))
	if !strings.Contains(plugin(), tokenOf(b)) {
		t.Fatalf("thatch install --force did not take the plugin over:\n%s", plugin())
	}
	if want := "took the plugin over from the running thatch of the data folder " + a.DataDir + " (--force)"; !strings.Contains(out.String(), want) {
		t.Errorf("thatch install --force printed:\n%s\nwant %q", out.String(), want)
	}

	// B is stopped: A's install takes the plugin back, and says from where.
	stopA()
	out.Reset()
	must(t, client(ctx, a, "install", nil, &out))
	if !strings.Contains(plugin(), tokenOf(a)) {
		t.Fatalf("thatch install did not take over a stopped thatch's plugin:\n%s", plugin())
	}
	if want := "took the plugin over from the data folder " + b.DataDir + ", whose thatch is not running"; !strings.Contains(out.String(), want) {
		t.Errorf("thatch install printed:\n%s\nwant %q", out.String(), want)
	}
	out.Reset()
	must(t, client(ctx, a, "install", nil, &out))
	if out.String() != "up to date in "+oc+"\n" {
		t.Errorf("a second install for the same data folder printed %q, want it up to date", out.String())
	}
}
