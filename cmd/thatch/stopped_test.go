package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/internal/testkit"
)

// readCommands are the command lines that only read, each with and without --json.
func readCommands(memID string) [][]string {
	var out [][]string
	for _, line := range [][]string{
		{"memories"}, {"memories", "--search", "sqlite"}, {"memories", "--project", "/tmp/p1"}, {"memories", "show", memID},
		{"memories", "projects"}, {"memories", "hygiene"}, {"sessions"}, {"entries", "ses_a"}, {"costs"}, {"deadletters"},
	} {
		out = append(out, line, append(append([]string{}, line...), "--json"))
	}
	return append(out, []string{"memories", "export"})
}

// runLine runs one thatch command line in process against c.
func runLine(c daemon.Config, line []string) (string, error) {
	var out bytes.Buffer
	err := client(context.Background(), c, line[0], line[1:], &out)
	return out.String(), err
}

// dataFiles reads the journal's and the memory store's files and their WALs, by name;
// absent files are left out.
func dataFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, name := range []string{"thatch.db", "thatch.db-wal", "memories.db", "memories.db-wal"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		must(t, err)
		out[name] = data
	}
	return out
}

// TestReadCommandsWhenStopped: with thatch stopped, the commands that only read answer
// from the data folder's files exactly what the running daemon answered (text and
// --json), say so in one line on standard error, and leave the files as they were; the
// commands that change something fail at once, naming the data folder and what to do;
// an export writes the whole file.
func TestReadCommandsWhenStopped(t *testing.T) {
	r := newRig(t, "v1")
	ctx := r.ctx()
	r.start()
	must(t, r.host.Hello(ctx, "b1"))
	must(t, r.host.Created(ctx, "ses_a", "", "t", r.host.Dir))
	must(t, r.host.ToolExecuted(ctx, "ses_a", "c1", "bash", "ls"))
	must(t, r.host.ToolExecuted(ctx, "ses_a", "c2", "read", "go.mod"))
	must(t, r.host.PublishRaw(ctx, "session.status", []byte(`{not json`), "bad-1", 0))
	r.waitApplied(4)
	export := filepath.Join(t.TempDir(), "in.jsonl")
	must(t, os.WriteFile(export, []byte(
		`{"id":"mem_0123456789abcdef0123","project":"/tmp/p1","kind":"pitfall","content":"the build needs a real sqlite file","createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z"}`+"\n"+
			`{"id":"mem_0123456789abcdef0124","project":"/tmp/p1","kind":"fact","content":"the tests use real sqlite files","createdAt":"2026-01-02T00:00:00Z","updatedAt":"2026-01-02T00:00:00Z"}`+"\n"+
			`{"id":"mem_0123456789abcdef0125","project":"/tmp/p2","kind":"fact","content":"another project","createdAt":"2026-01-03T00:00:00Z","updatedAt":"2026-01-03T00:00:00Z"}`+"\n"), 0o600))
	cli(t, r, "memories", "import", export)
	memID := "mem_0123456789abcdef0123"

	live := map[string]string{}
	for _, line := range readCommands(memID) {
		out, err := runLine(r.cfg, line)
		if err != nil {
			t.Fatalf("thatch %s with thatch running: %v", strings.Join(line, " "), err)
		}
		live[strings.Join(line, " ")] = out
	}
	if !strings.Contains(live["sessions"], "ses_a") || !strings.Contains(live["entries ses_a"], "c2") ||
		!strings.Contains(live["deadletters"], "not a JSON object") || strings.Count(live["memories export"], "\n") != 3 {
		t.Fatalf("the running daemon's answers lack what was published:\n%v", live)
	}
	r.stop()

	before := dataFiles(t, r.dataDir)
	for _, line := range readCommands(memID) {
		name := strings.Join(line, " ")
		out, err := runLine(r.cfg, line)
		if err != nil {
			t.Errorf("thatch %s with thatch stopped: %v", name, err)
			continue
		}
		if out != live[name] {
			t.Errorf("thatch %s with thatch stopped printed\n%s\nwith thatch running\n%s", name, out, live[name])
		}
	}
	for _, line := range [][]string{
		{"memories", "forget", memID}, {"memories", "restore", memID}, {"memories", "import", export},
		{"memories", "dismiss", memID, "mem_0123456789abcdef0124"}, {"sweep"},
	} {
		_, err := runLine(r.cfg, line)
		want := "thatch is not running (data folder " + r.dataDir + "): start it with `thatch serve`"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("thatch %s with thatch stopped: %v, want %q", strings.Join(line, " "), err, want)
		}
	}
	after := dataFiles(t, r.dataDir)
	for name, data := range before {
		if !bytes.Equal(after[name], data) {
			t.Errorf("%s changed while thatch was stopped", name)
		}
	}
	for name, data := range after {
		if _, ok := before[name]; !ok && len(data) > 0 {
			t.Errorf("%s appeared with %d bytes while thatch was stopped", name, len(data))
		}
	}

	// The binary, as a person runs it: thatch memories export > FILE.
	bin := binary(t)
	file := filepath.Join(t.TempDir(), "out.jsonl")
	f, err := os.Create(file)
	must(t, err)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "memories", "export")
	cmd.Env = append(os.Environ(), "THATCH_DATA_DIR="+r.dataDir, "THATCH_NATS_URL="+r.url, "GORACE=atexit_sleep_ms=0")
	cmd.Stdout, cmd.Stderr = f, &stderr
	err = cmd.Run()
	f.Close()
	if err != nil {
		t.Fatalf("thatch memories export > FILE with thatch stopped: %v\n%s", err, stderr.String())
	}
	if got, _ := os.ReadFile(file); string(got) != live["memories export"] {
		t.Errorf("the export file with thatch stopped is\n%s\nwant\n%s", got, live["memories export"])
	}
	notice := "thatch is not running: read from " + filepath.Join(r.dataDir, "memories.db") + "\n"
	if stderr.String() != notice+"exported 3 memories\n" {
		t.Errorf("thatch memories export said on standard error:\n%s\nwant one line saying where it read, then the count", stderr.String())
	}
}

// TestExportWritesNothingOnFailure: an export whose second page fails prints nothing at
// all, not the first page: thatch memories export > FILE never leaves a file that looks
// whole and is not.
func TestExportWritesNothingOnFailure(t *testing.T) {
	ns := testkit.StartBroker(t, testkit.BrokerOptions{})
	nc, _ := testkit.Connect(t, ns.ClientURL(), "")
	// A daemon whose export fails after its first page, one larger than a write buffer.
	first := `{"result":{"items":[{"id":"mem_1","project":"p","content":"` + strings.Repeat("x", 64<<10) + `"}],"nextCursor":"mem_1"}}`
	sub, err := nc.Subscribe("thatch.api.memory.export", func(m *nats.Msg) {
		if strings.Contains(string(m.Data), `"cursor":""`) {
			_ = m.Respond([]byte(first))
			return
		}
		_ = m.Respond([]byte(`{"error":{"name":"UnavailableError","message":"the store failed"}}`))
	})
	must(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	must(t, nc.Flush())
	c := cliConfig(t)
	c.NATSURL = ns.ClientURL()
	out, err := runLine(c, []string{"memories", "export"})
	if err == nil || !strings.Contains(err.Error(), "the store failed") || out != "" {
		t.Fatalf("an export failing at its second page: %v, printed %q; want the error and nothing printed", err, out)
	}
}

// TestChangeFailsWhenThatchDoesNotAnswer: a command that changes something, with a thatch
// that takes requests and never answers (stuck), fails naming the cause, not after its
// request's own timeout (a minute for an import's batch).
func TestChangeFailsWhenThatchDoesNotAnswer(t *testing.T) {
	ns := testkit.StartBroker(t, testkit.BrokerOptions{})
	nc, _ := testkit.Connect(t, ns.ClientURL(), "")
	sub, err := nc.Subscribe("thatch.api.>", func(*nats.Msg) {}) // takes every request, answers none
	must(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	must(t, nc.Flush())
	c := cliConfig(t)
	c.NATSURL = ns.ClientURL()
	file := filepath.Join(t.TempDir(), "in.jsonl")
	must(t, os.WriteFile(file, []byte(`{"id":"mem_0123456789abcdef0123","project":"/tmp/p1","kind":"fact","content":"x"}`+"\n"), 0o600))
	for _, line := range [][]string{{"memories", "import", file}, {"sweep"}} {
		_, err := runLine(c, line)
		if err == nil || !strings.Contains(err.Error(), "thatch does not answer at ") || !strings.Contains(err.Error(), "within 3s") {
			t.Errorf("thatch %s with a thatch that does not answer: %v, want it said", strings.Join(line, " "), err)
		}
	}
}
