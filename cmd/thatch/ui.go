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
	"github.com/thatch-dev/thatch/adapters/web"
)

const uiUsage = `usage: thatch ui [--no-open]
  print the link to thatch's web page (hosts, sessions, memories, dead letters, the sweep
  plan) and open it in a browser when one is at hand. The link carries the broker token of
  THATCH_DATA_DIR/broker.token: keep it private. The page is served by thatch serve on
  THATCH_HTTP_LISTEN (default 127.0.0.1:4224).`

// pageURL is the operator endpoint's base address.
func pageURL(addr string, tls bool) string {
	return strings.TrimSuffix(web.Link(addr, "", tls), "?token=")
}

// ui prints the web page's link and opens it when it can.
func ui(ctx context.Context, c Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	fs.SetOutput(out)
	noOpen := fs.Bool("no-open", false, "print the link only")
	fs.Usage = func() { fmt.Fprintln(out, uiUsage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("thatch ui takes no arguments, got %q\n%s", fs.Args(), uiUsage)
	}
	// The daemon's own address comes first: it may run with another THATCH_HTTP_LISTEN.
	base := statusBroker(c.DataDir).PageURL
	if base == "" {
		if !c.HTTPOn() {
			return fmt.Errorf("THATCH_HTTP_LISTEN=off: the web page is disabled; unset it (or set an address) and restart thatch serve")
		}
		base = pageURL(c.HTTPListen, c.HTTPTLSCert != "")
	}
	token, err := os.ReadFile(c.tokenPath())
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no broker token in %s: start thatch serve first (it creates the token the page takes)", c.DataDir)
	}
	if err != nil {
		return fmt.Errorf("read the broker token: %w", err)
	}
	tok := strings.TrimSpace(string(token))
	if !natsbus.ValidToken(tok) {
		return fmt.Errorf("%s does not hold a usable token: start thatch serve, which replaces it", c.tokenPath())
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
	if !*noOpen {
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
