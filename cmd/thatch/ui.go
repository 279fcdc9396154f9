package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// uiCommand is thatch ui: the web page's link.
type uiCommand struct{ noOpen bool }

func (*uiCommand) Usage() usage {
	return usage{Name: "ui", Summary: "print the web page's link (and open it): sessions, memories, dead letters, sweep",
		Help: `print the link to thatch's web page (hosts, sessions, memories, dead letters, the sweep
plan) and open it in a browser when one is at hand. The link carries the broker token of
THATCH_DATA_DIR/broker.token: keep it private. The page is served by thatch serve on
THATCH_HTTP_LISTEN (default 127.0.0.1:4224).`}
}

func (u *uiCommand) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&u.noOpen, "no-open", false, "print the link only")
}

// Run prints the web page's link and opens it when it can.
func (u *uiCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	// The daemon's own address comes first: it may run with another THATCH_HTTP_LISTEN.
	base := savedStatus(c).PageURL
	if base == "" {
		if !c.HTTPOn() {
			return fmt.Errorf("THATCH_HTTP_LISTEN=off: the web page is disabled; unset it (or set an address) and restart thatch serve")
		}
		base = daemon.PageURL(c.HTTPListen, c.HTTPTLSCert != "")
	}
	token, err := os.ReadFile(c.TokenPath())
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no broker token in %s: start thatch serve first (it creates the token the page takes)", c.DataDir)
	}
	if err != nil {
		return fmt.Errorf("read the broker token: %w", err)
	}
	tok := strings.TrimSpace(string(token))
	if !natsbus.ValidToken(tok) {
		return fmt.Errorf("%s does not hold a usable token: start thatch serve, which replaces it", c.TokenPath())
	}
	link := base + "?token=" + tok
	// Is the page there? Say so rather than hand out a link that does not open.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // only /healthz, no secret sent
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, base+"healthz", nil)
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	fmt.Fprintln(out, link)
	if err != nil || resp.StatusCode != http.StatusOK {
		fmt.Fprintf(out, "(nothing answers at %s: is thatch serve running? The link works once it is.)\n", base)
		return nil
	}
	if !u.noOpen {
		if opener := browserOpener(); opener != "" {
			if err := exec.Command(opener, link).Start(); err == nil {
				fmt.Fprintf(out, "opened in your browser (%s)\n", opener)
			}
		}
	}
	return nil
}

// browserOpener is the command that opens a link in the person's browser, or "" where
// there is none (a server without a display).
func browserOpener() string {
	switch goruntime.GOOS {
	case "darwin":
		return "open"
	case "linux", "freebsd", "openbsd", "netbsd":
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return ""
		}
		if p, err := exec.LookPath("xdg-open"); err == nil {
			return p
		}
	}
	return ""
}
