package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/opencode"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// TestCLIStatusBridgeRow: thatch status names the opencode its bridge streams, as which
// host, and whether it is connected, right after the hosts online, which count opencode
// online until a goodbye it never sends when it goes away: so the count names the host of
// a bridge that is not connected. Read from the status file (no daemon answers), the times
// are those of the status as it was written: "until" then, for how long.
func TestCLIStatusBridgeRow(t *testing.T) {
	c := cliConfig(t)
	written := time.Now().Add(-time.Hour).Truncate(time.Second)
	since := written.Add(-90 * time.Second)
	at, then := since.Local().Format(time.RFC3339), written.Local().Format(time.RFC3339)
	for _, tc := range []struct {
		bridge *opencode.BridgeStatus
		hosts  string // the hosts online row
		want   string // the line after it
	}{
		{&opencode.BridgeStatus{URL: "http://127.0.0.1:4096", HostID: "oc-1", Connected: true, Since: since}, "hosts online 1",
			"opencode bridge http://127.0.0.1:4096 (host oc-1): connected until " + then + " (for 1m30s, since " + at + ")"},
		{&opencode.BridgeStatus{URL: "http://REDACTED@127.0.0.1:4096", HostID: "oc-1", Since: since,
			Error: `Get "http://127.0.0.1:4096/global/event": dial tcp 127.0.0.1:4096: connect: connection refused`},
			"hosts online 1 (opencode oc-1 unreachable since " + since.Local().Format(time.TimeOnly) + ")",
			"opencode bridge http://REDACTED@127.0.0.1:4096 (host oc-1): UNREACHABLE until " + then + " (for 1m30s, since " + at + ")"},
		{&opencode.BridgeStatus{URL: "http://127.0.0.1:4096", HostID: "oc-1", Since: since},
			"hosts online 1 (opencode oc-1 connecting since " + since.Local().Format(time.TimeOnly) + ")",
			"opencode bridge http://127.0.0.1:4096 (host oc-1): connecting until " + then},
		{nil, "hosts online 1", "sessions 0"}, // no in-process bridge: no row
	} {
		st := runtime.StatusView{Version: "v", Hosts: 1}
		if tc.bridge != nil {
			st.Bridge, _ = json.Marshal(tc.bridge)
		}
		writeStatus(t, c.DataDir, written, st, "")
		var out bytes.Buffer
		if err := client(context.Background(), c, "status", nil, &out); err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("status from the file: %v, want the stale error", err)
		}
		text := squash(out.String())
		if !strings.Contains(text, "; last status written 1h0m") || !strings.Contains(text, " ago at "+written.Local().Format(time.TimeOnly)+", as it was then:\n") {
			t.Errorf("thatch status from the file does not say when it was written:\n%s", text)
		}
		_, after, ok := strings.Cut(text, "\n"+tc.hosts+"\n")
		if !ok || !strings.HasPrefix(after, tc.want) {
			t.Errorf("thatch status lacks %q, then %q:\n%s", tc.hosts, tc.want, text)
		}
		if strings.Contains(text, " ago)") {
			t.Errorf("thatch status from the file counts a duration up to now:\n%s", text)
		}
		if tc.bridge != nil && tc.bridge.Error != "" && !strings.Contains(after, "): "+tc.bridge.Error+"\n") {
			t.Errorf("thatch status lacks the bridge's error %q:\n%s", tc.bridge.Error, text)
		}
	}
}

// TestServeStatusNamesBridge: thatch serve with THATCH_OPENCODE_URL puts its bridge in
// status: the URL without its credentials, and, with nothing listening there, why it is
// not connected.
func TestServeStatusNamesBridge(t *testing.T) {
	c := embeddedConfig(t)
	c.OpencodeURL = "http://opuser:secret@127.0.0.1:1"
	stop := startServe(t, c, testkit.Logger(t))
	defer stop()
	var st *runtime.StatusView
	waitFor(t, "the bridge's failure in status", func() bool {
		st = cliStatus(c)
		return st != nil && bridgeOf(*st) != nil && bridgeOf(*st).Error != ""
	})
	b := bridgeOf(*st)
	if b.URL != "http://REDACTED@127.0.0.1:1" || b.HostID != opencode.HostIDFor(c.OpencodeURL) || b.Connected || b.Since.IsZero() ||
		strings.Contains(b.Error, "secret") || strings.Contains(b.Error, "opuser") {
		t.Fatalf("status's bridge: %+v", b)
	}
	// The count of hosts online names the bridge's host, which is not there.
	var out bytes.Buffer
	must(t, client(context.Background(), c, "status", nil, &out))
	away := "hosts online 0 (opencode " + b.HostID + " unreachable since " + b.Since.Local().Format(time.TimeOnly) + ")\n"
	if text := squash(out.String()); !strings.Contains(text, away) {
		t.Errorf("thatch status lacks %q:\n%s", away, text)
	}

	// Stopped: its last status, as it was when written, and said to be so at once.
	waitFor(t, "the status file to show the bridge's failure", func() bool {
		f, err := daemon.ReadStatusFile(c.DataDir)
		return err == nil && bridgeOf(f.Status) != nil && bridgeOf(f.Status).Error != ""
	})
	stop()
	f, err := daemon.ReadStatusFile(c.DataDir)
	must(t, err)
	out.Reset()
	if err := client(context.Background(), c, "status", nil, &out); err == nil || !strings.Contains(err.Error(), "thatch is not running") {
		t.Errorf("status of a stopped thatch: %v, want an error saying it is not running", err)
	}
	text := squash(out.String())
	header := "thatch is not running (it stopped at " + f.Stopped.Local().Format(time.TimeOnly) + "); last status written "
	row := "UNREACHABLE until " + f.At.Local().Format(time.RFC3339) + " (for "
	if !strings.HasPrefix(text, header) || !strings.Contains(text, " ago at "+f.At.Local().Format(time.TimeOnly)+", as it was then:\n") ||
		!strings.Contains(text, row) || strings.Contains(text, " ago)") {
		t.Errorf("thatch status of a stopped thatch:\n%s\nwant it to start %q, and the bridge %q", text, header, row)
	}
	out.Reset()
	_ = client(context.Background(), c, "status", []string{"--json"}, &out)
	var doc struct {
		Stale     bool      `json:"stale"`
		Running   bool      `json:"running"`
		WrittenAt time.Time `json:"writtenAt"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || !doc.Stale || doc.Running || !doc.WrittenAt.Equal(f.At) {
		t.Errorf("thatch status --json of a stopped thatch: %s (%v), want stale, not running, writtenAt %s", out.String(), err, f.At)
	}
}
