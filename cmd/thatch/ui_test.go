package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/adapters/natsbus"
)

// TestUILink: thatch ui asks the running daemon for a one-time link to its page: the link
// holds no broker token, opens the page once (a session cookie, a redirect to /), and a
// second use says to run thatch ui again; each run prints a new link. A daemon with the
// page off, or none at all, is an error in words.
func TestUILink(t *testing.T) {
	ctx := context.Background()
	if err := ui(ctx, cliConfig(t), []string{"--no-open"}, io.Discard); err == nil || !strings.Contains(err.Error(), "is thatch serve running") {
		t.Fatalf("without a daemon: %v", err)
	}

	r := newRig(t, "v1")
	addr := freeAddr(t)
	r.cfg.HTTPListen = addr
	r.start()
	var out strings.Builder
	must(t, ui(ctx, r.cfg, []string{"--no-open"}, &out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	link := lines[0]
	if !strings.HasPrefix(link, "http://"+addr+"/login?code=") || len(lines) != 2 || !strings.Contains(lines[1], "once, within a minute") {
		t.Fatalf("thatch ui printed:\n%s", out.String())
	}
	token, err := os.ReadFile(r.cfg.TokenPath())
	must(t, err)
	if tok := strings.TrimSpace(string(token)); !natsbus.ValidToken(tok) || strings.Contains(link, tok) {
		t.Errorf("the link %s carries the broker token", link)
	}

	hc := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string, c *http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		if c != nil {
			req.AddCookie(c)
		}
		resp, err := hc.Do(req)
		must(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	resp, _ := get(link, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(resp.Cookies()) != 1 {
		t.Fatalf("the link: %d to %q with cookies %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	c := resp.Cookies()[0]
	if page, body := get("http://"+addr+"/", c); page.StatusCode != 200 || !strings.Contains(body, "Overview") {
		t.Errorf("the page with the link's cookie: %d", page.StatusCode)
	}
	if again, body := get(link, nil); again.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "Run thatch ui again") || len(again.Cookies()) != 0 {
		t.Errorf("the link used twice: %d\n%s", again.StatusCode, body)
	}
	out.Reset()
	must(t, ui(ctx, r.cfg, []string{"--no-open"}, &out))
	if next := strings.SplitN(out.String(), "\n", 2)[0]; next == link || !strings.HasPrefix(next, "http://"+addr+"/login?code=") {
		t.Errorf("a second thatch ui printed %q after %q", next, link)
	}
	r.stop()

	// The page off: thatch ui says so.
	off := newRig(t, "v1")
	off.start()
	if err := ui(ctx, off.cfg, []string{"--no-open"}, &out); err == nil || !strings.Contains(err.Error(), "THATCH_HTTP_LISTEN=off") {
		t.Errorf("with the page off: %v", err)
	}
	if err := ui(ctx, off.cfg, []string{"extra"}, &out); err == nil || !strings.Contains(err.Error(), "no arguments") {
		t.Fatalf("with an argument: %v", err)
	}
}
