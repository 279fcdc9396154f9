package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// TestUILink: thatch ui prints the page's link with the broker token, at the address the
// running daemon wrote into its status file; it says so when nothing answers there, and
// fails in words when the page is off or no token exists yet.
func TestUILink(t *testing.T) {
	c := daemon.Config{DataDir: t.TempDir(), HTTPListen: "127.0.0.1:1"}
	var out strings.Builder
	err := ui(context.Background(), c, nil, &out)
	if err == nil || !strings.Contains(err.Error(), "start thatch serve first") {
		t.Fatalf("without a token: %v", err)
	}
	token, _, err := natsbus.EnsureToken(c.TokenPath())
	must(t, err)

	// Nothing listens at the configured address.
	out.Reset()
	must(t, ui(context.Background(), c, []string{"--no-open"}, &out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if lines[0] != "http://127.0.0.1:1/?token="+token || len(lines) != 2 || !strings.Contains(lines[1], "is thatch serve running") {
		t.Fatalf("with nothing at the address:\n%s", out.String())
	}

	// The daemon runs elsewhere: its status file says where.
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer page.Close()
	data, _ := json.Marshal(daemon.SavedStatus{PageURL: page.URL + "/"})
	must(t, os.WriteFile(filepath.Join(c.DataDir, daemon.StatusFile), data, 0o600))
	out.Reset()
	must(t, ui(context.Background(), c, []string{"--no-open"}, &out))
	if got := strings.TrimSpace(out.String()); got != page.URL+"/?token="+token {
		t.Fatalf("with the daemon's page at %s: %q", page.URL, got)
	}

	// Off, and no daemon wrote an address.
	must(t, os.Remove(filepath.Join(c.DataDir, daemon.StatusFile)))
	c.HTTPListen = "off"
	if err := ui(context.Background(), c, nil, &out); err == nil || !strings.Contains(err.Error(), "THATCH_HTTP_LISTEN=off") {
		t.Fatalf("with the page off: %v", err)
	}
	if err := ui(context.Background(), c, []string{"extra"}, &out); err == nil || !strings.Contains(err.Error(), "no arguments") {
		t.Fatalf("with an argument: %v", err)
	}
}
