package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/opencode"
	"github.com/thatch-dev/thatch/runtime"
)

// TestCLIStatusBridgeRow: thatch status names the opencode its bridge streams, as which
// host, and whether it is connected, right after the hosts online, which count opencode
// online until a goodbye it never sends when it goes away. (Read from the status file: no
// daemon answers.)
func TestCLIStatusBridgeRow(t *testing.T) {
	c := cliConfig(t)
	since := time.Now().Add(-90 * time.Second).Truncate(time.Second)
	at := since.Local().Format(time.RFC3339)
	for _, tc := range []struct {
		bridge *opencode.BridgeStatus
		want   string // the line after hosts online
	}{
		{&opencode.BridgeStatus{URL: "http://127.0.0.1:4096", HostID: "oc-1", Connected: true, Since: since},
			"opencode bridge http://127.0.0.1:4096 (host oc-1): connected since " + at + " (1m3"},
		{&opencode.BridgeStatus{URL: "http://REDACTED@127.0.0.1:4096", HostID: "oc-1", Since: since,
			Error: `Get "http://127.0.0.1:4096/global/event": dial tcp 127.0.0.1:4096: connect: connection refused`},
			"opencode bridge http://REDACTED@127.0.0.1:4096 (host oc-1): UNREACHABLE since " + at + " (1m3"},
		{&opencode.BridgeStatus{URL: "http://127.0.0.1:4096", HostID: "oc-1", Since: since},
			"opencode bridge http://127.0.0.1:4096 (host oc-1): connecting since " + at},
		{nil, "sessions 0"}, // no in-process bridge: no row
	} {
		st := runtime.StatusView{Version: "v", Hosts: 1}
		if tc.bridge != nil {
			st.Bridge, _ = json.Marshal(tc.bridge)
		}
		writeStatus(t, c.DataDir, time.Now(), st, "")
		var out bytes.Buffer
		if err := client(context.Background(), c, "status", nil, &out); err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("status from the file: %v, want the stale error", err)
		}
		text := squash(out.String())
		_, after, ok := strings.Cut(text, "\nhosts online 1\n")
		if !ok || !strings.HasPrefix(after, tc.want) {
			t.Errorf("thatch status, after hosts online, lacks %q:\n%s", tc.want, text)
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
	stop := startServe(t, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
}
