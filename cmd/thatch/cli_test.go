package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// cliConfig is the defaults with a data folder of the test's own and a broker address
// where nothing listens.
func cliConfig(t *testing.T) daemon.Config {
	t.Helper()
	c, err := daemon.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	c.DataDir = t.TempDir()
	c.NATSListen = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return c
}

// client runs the thatch command line cmd args against c, writing to out, as thatch does
// with the configuration of its environment; memoriesCmd and ui run thatch memories and
// thatch ui.
func client(ctx context.Context, c daemon.Config, cmd string, args []string, out io.Writer) error {
	return runCommand(ctx, func() (daemon.Config, error) { return c, nil }, out, append([]string{cmd}, args...))
}

func memoriesCmd(ctx context.Context, c daemon.Config, args []string, out io.Writer) error {
	return client(ctx, c, "memories", args, out)
}

func ui(ctx context.Context, c daemon.Config, args []string, out io.Writer) error {
	return client(ctx, c, "ui", args, out)
}

// TestCLIHelp: --help on a subcommand prints that subcommand's usage, with its own flags
// only, and succeeds; a flag of another subcommand is an error that shows the usage.
func TestCLIHelp(t *testing.T) {
	c := cliConfig(t)
	ctx := context.Background()
	for cmd, flags := range map[string][]string{
		"status":   {"--json"},
		"sessions": {"--host", "--json"},
		"entries":  {"--json"},
		"sweep":    {"--dry-run", "--host", "--json"},
		"costs":    {"--days", "--json"},
	} {
		for _, help := range []string{"--help", "-h"} {
			var out bytes.Buffer
			if err := client(ctx, c, cmd, []string{help}, &out); err != nil {
				t.Errorf("thatch %s %s: %v", cmd, help, err)
			}
			text := out.String()
			if !strings.HasPrefix(text, "usage: thatch "+cmd+" ") {
				t.Errorf("thatch %s %s printed %q, want its usage", cmd, help, text)
			}
			for _, f := range []string{"--days", "--host", "--dry-run", "--json"} {
				if strings.Contains(text, f) != strings.Contains(strings.Join(flags, " "), f) {
					t.Errorf("thatch %s --help mentions %s: %v, want %v:\n%s", cmd, f, !strings.Contains(strings.Join(flags, " "), f), strings.Contains(strings.Join(flags, " "), f), text)
				}
			}
		}
	}
	err := client(ctx, c, "status", []string{"--days", "3"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "-days") || !strings.Contains(err.Error(), "usage: thatch status") {
		t.Errorf("thatch status --days 3: %v, want the unknown flag and the usage", err)
	}
	var out bytes.Buffer
	if err := memoriesCmd(ctx, c, []string{"--help"}, &out); err != nil || !strings.Contains(out.String(), "--limit N") {
		t.Errorf("thatch memories --help: %v\n%s", err, out.String())
	}
	for _, cmd := range []string{"serve", "bridge", "install", "version"} {
		out.Reset()
		if err := client(ctx, c, cmd, []string{"--help"}, &out); err != nil || !strings.HasPrefix(out.String(), "usage: thatch "+cmd) {
			t.Errorf("thatch %s --help: %v\n%s", cmd, err, out.String())
		}
	}
	out.Reset()
	must(t, client(ctx, c, "install", []string{"--help"}, &out))
	install := out.String()
	out.Reset()
	must(t, client(ctx, c, "help", nil, &out))
	if !strings.Contains(install, "plugin") || !strings.Contains(out.String(), "--limit N") {
		t.Errorf("the install help or the top-level help is incomplete:\n%s\n%s", install, out.String())
	}
	// The benchmark moved to thatch-bench: thatch bench says where.
	if err := run([]string{"bench", "--help"}); err == nil || !strings.Contains(err.Error(), "thatch-bench") {
		t.Errorf("thatch bench --help: %v, want where the benchmark went", err)
	}
}

// TestCLICostsDays: --days out of range is refused before anything is asked, in the
// user's words.
func TestCLICostsDays(t *testing.T) {
	c := cliConfig(t)
	for _, days := range []string{"0", "-1", "401"} {
		err := client(context.Background(), c, "costs", []string{"--days", days}, &bytes.Buffer{})
		if err == nil || !strings.HasPrefix(err.Error(), "--days must be between 1 and 400") {
			t.Errorf("thatch costs --days %s: %v, want \"--days must be between 1 and 400\"", days, err)
		}
	}
}

// writeStatus writes a status file as thatch serve does, with brokerURL when not "".
func writeStatus(t *testing.T, dir string, at time.Time, st runtime.StatusView, brokerURL string) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"at": at, "status": st, "brokerURL": brokerURL})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, daemon.StatusFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCLIFindsBrokerInStatusFile: a daemon whose broker listens elsewhere than this
// shell's THATCH_NATS_LISTEN says is found through the broker URL of its status file;
// without one, the error says which variables to set.
func TestCLIFindsBrokerInStatusFile(t *testing.T) {
	ns := testkit.StartBroker(t, testkit.BrokerOptions{})
	nc, _ := testkit.Connect(t, ns.ClientURL(), "")
	// The daemon's status method, answering as thatch does.
	sub, err := nc.Subscribe("thatch.api.status", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"result":{"version":"live","sessions":3}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	must(t, nc.Flush())

	c := cliConfig(t)
	ctx := context.Background()
	err = client(ctx, c, "status", []string{"--json"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the broker at nats://"+c.NATSListen) ||
		!strings.Contains(err.Error(), "THATCH_NATS_LISTEN") || !strings.Contains(err.Error(), "THATCH_DATA_DIR") {
		t.Fatalf("no daemon found: %v, want an error naming the address and the variables", err)
	}
	writeStatus(t, c.DataDir, time.Now(), runtime.StatusView{Version: "file"}, ns.ClientURL())
	var out bytes.Buffer
	if err := client(ctx, c, "status", []string{"--json"}, &out); err != nil {
		t.Fatalf("status with the broker URL in the status file: %v\n%s", err, out.String())
	}
	var st runtime.StatusView
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || st.Version != "live" || st.Sessions != 3 {
		t.Fatalf("status printed %s (%v), want the live daemon's", out.String(), err)
	}
	// An explicit THATCH_NATS_URL is taken as it is.
	c.NATSURL = "nats://user:s3cret@" + c.NATSListen
	err = client(ctx, c, "sessions", nil, &bytes.Buffer{})
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "nats://"+c.NATSListen) {
		t.Errorf("with THATCH_NATS_URL: %v, want an unreachable broker, named without its password", err)
	}
}

// TestCLIStatusText: the status table counts in words that agree with their numbers,
// says when there is no daily limit, and names the extraction model even when
// THATCH_EXTRACT_MODEL is unset. (Read from the status file: no daemon answers.)
func TestCLIStatusText(t *testing.T) {
	c := cliConfig(t)
	one := runtime.Spend{Extractions: 1, Tokens: 1, TokensIn: 1, USD: 0.0001}
	for _, tc := range []struct {
		x    runtime.ExtractionView
		want []string
	}{
		{runtime.ExtractionView{Today: one, Week: runtime.Spend{Extractions: 2, Tokens: 1600, TokensIn: 1300, TokensOut: 300, USD: 0.0084}},
			[]string{"extraction today (UTC) 1 extraction, 1 token (1 in, 0 out), $0.0001",
				"extraction last 7 days 2 extractions, 1.6k tokens (1.3k in, 300 out), $0.0084",
				"extraction budget no limit (THATCH_EXTRACT_DAILY_TOKENS unset)",
				"extraction model the host's small model, else the session's own (THATCH_EXTRACT_MODEL unset)"}},
		{runtime.ExtractionView{Today: one, DailyTokens: 1, BudgetReached: true, Model: "anthropic/claude-haiku-4-5"},
			[]string{"extraction budget 1 token a day, 1 used today: REACHED",
				"extraction model anthropic/claude-haiku-4-5 (THATCH_EXTRACT_MODEL)"}},
	} {
		x := tc.x
		writeStatus(t, c.DataDir, time.Now(), runtime.StatusView{Version: "v", Extraction: &x}, "")
		var out bytes.Buffer
		if err := client(context.Background(), c, "status", nil, &out); err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("status from the file: %v, want the stale error", err)
		}
		text := squash(out.String())
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("thatch status lacks %q:\n%s", w, text)
			}
		}
	}
}

// TestInstallLogsPlugin: thatch serve's install logs the plugin as a plugin.
func TestInstallLogsPlugin(t *testing.T) {
	c := cliConfig(t)
	c.OpencodeDir = t.TempDir()
	var logs bytes.Buffer
	changes, err := daemon.Install(c, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil || len(changes) != 3 {
		t.Fatalf("install: %+v, %v", changes, err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var plugin, commands int
	for _, l := range lines {
		switch {
		case strings.Contains(l, `msg="installed plugin"`) && strings.Contains(l, filepath.Join("plugin", "thatch.js")):
			plugin++
		case strings.Contains(l, `msg="installed slash command"`) && strings.Contains(l, filepath.Join("command", "thatch")):
			commands++
		}
	}
	if plugin != 1 || commands != 2 {
		t.Errorf("install logged:\n%s\nwant one plugin line and two slash-command lines", logs.String())
	}
}

// TestLoggerNoColorInFile: THATCH_LOG_FORMAT=text into a file writes no colour codes;
// auto into a file is JSON.
func TestLoggerNoColorInFile(t *testing.T) {
	for format, want := range map[string]string{"text": "INF hello n=1", "auto": `"msg":"hello"`} {
		f, err := os.Create(filepath.Join(t.TempDir(), "log"))
		if err != nil {
			t.Fatal(err)
		}
		daemon.NewLogger(f, "info", format).Info("hello", "n", 1)
		f.Close()
		data, _ := os.ReadFile(f.Name())
		if bytes.Contains(data, []byte("\x1b[")) || !bytes.Contains(data, []byte(want)) {
			t.Errorf("THATCH_LOG_FORMAT=%s into a file wrote %q, want %q without colour codes", format, data, want)
		}
	}
}

// TestCLICommands: every command's --help and its line in thatch's list are made from the
// flags it takes, each flag's value named, and the README's table of commands shows the
// same synopsis; a flag it does not take, and an argument more than it takes, are errors
// naming them. (All before any daemon is asked.)
func TestCLICommands(t *testing.T) {
	c := cliConfig(t)
	ctx := context.Background()
	var list bytes.Buffer
	must(t, client(ctx, c, "help", nil, &list))
	readme, err := os.ReadFile("../../README.md")
	must(t, err)
	for _, cmd := range allCommands() {
		u := cmd.Usage()
		name := strings.Fields(u.Name)
		var help bytes.Buffer
		must(t, client(ctx, c, name[0], append(name[1:], "--help"), &help))
		syn := synopsis(cmd)
		if !strings.HasPrefix(help.String(), "usage: "+syn+"\n") || !strings.Contains(list.String(), "  "+syn+" ") && !strings.Contains(list.String(), "  "+syn+"\n") {
			t.Errorf("thatch %s: the synopsis %q is not its --help's first line and its line in the list:\n%s", u.Name, syn, help.String())
		}
		if !strings.Contains(string(readme), "| `"+syn+"` |") {
			t.Errorf("the README's Commands table has no row | `%s` |", syn)
		}
		flagSet(cmd).VisitAll(func(f *flag.Flag) {
			written := flagName(f)
			if value, _ := flag.UnquoteUsage(f); value != strings.ToUpper(value) {
				t.Errorf("thatch %s --%s: its value is named %q: back-quote a name in its usage", u.Name, f.Name, value)
			}
			if !strings.Contains(help.String(), "  "+written+" ") || !strings.Contains(syn, "["+written+"]") {
				t.Errorf("thatch %s --help does not describe %s:\n%s", u.Name, written, help.String())
			}
		})
		args := append(name[1:], u.Args...)
		err := client(ctx, c, name[0], append(args, "--no-such-flag"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-no-such-flag") || !strings.Contains(err.Error(), "usage: thatch "+u.Name) {
			t.Errorf("thatch %s --no-such-flag: %v, want the flag named and the usage", u.Name, err)
		}
		err = client(ctx, c, name[0], append(args, "extra"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), `"extra"`) {
			t.Errorf("thatch %s with an argument too many: %v, want it named", u.Name, err)
		}
	}
}

// TestCLIJSONIsOneDocument: every command with --json prints exactly one JSON document,
// whatever the daemon answers (here a page of one row to every method).
func TestCLIJSONIsOneDocument(t *testing.T) {
	ns := testkit.StartBroker(t, testkit.BrokerOptions{})
	nc, _ := testkit.Connect(t, ns.ClientURL(), "")
	sub, err := nc.Subscribe("thatch.api.>", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"result":{"items":[{"id":"mem_1"}],"nextCursor":""}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	must(t, nc.Flush())
	c := cliConfig(t)
	c.NATSURL = ns.ClientURL()
	for _, cmd := range allCommands() {
		if flagSet(cmd).Lookup("json") == nil {
			continue
		}
		u := cmd.Usage()
		name := strings.Fields(u.Name)
		var out bytes.Buffer
		if err := client(context.Background(), c, name[0], append(append(name[1:], u.Args...), "--json"), &out); err != nil {
			t.Errorf("thatch %s --json: %v", u.Name, err)
			continue
		}
		dec := json.NewDecoder(&out)
		var doc, more any
		if err := dec.Decode(&doc); err != nil {
			t.Errorf("thatch %s --json printed no JSON: %v", u.Name, err)
		} else if err := dec.Decode(&more); err != io.EOF {
			t.Errorf("thatch %s --json printed more than one document (%v)", u.Name, err)
		}
	}
}

// The CLI as a user types it: flags before or after the session, one clear error for a
// missing or unexpected argument.
func TestCLIArguments(t *testing.T) {
	r := newRig(t, "v1", "session.create", "session.prompt", "session.delete")
	r.start()
	defer r.stop()
	r.extractionOfOneEntry(r.ctx())
	for _, args := range [][]string{{"ses_a", "--json"}, {"--json", "ses_a"}} {
		var out strings.Builder
		if err := client(r.ctx(), r.cfg, "entries", args, &out); err != nil {
			t.Fatalf("entries %v: %v", args, err)
		}
		var rows []runtime.EntryView
		if err := json.Unmarshal([]byte(out.String()), &rows); err != nil || len(rows) != 1 || rows[0].ID != "c1" {
			t.Fatalf("entries %v printed %q (%v)", args, out.String(), err)
		}
	}
	for _, c := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"entries", []string{"--json"}, "usage: thatch entries SESSION"},
		{"sessions", []string{"ses_a"}, `thatch sessions takes no arguments, got ["ses_a"]`},
	} {
		if err := client(r.ctx(), r.cfg, c.cmd, c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want %q", c.cmd, c.args, err, c.want)
		}
	}
}
