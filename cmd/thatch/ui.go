package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// uiCommand is thatch ui: a one-time link to the web page.
type uiCommand struct{ noOpen bool }

func (*uiCommand) Usage() usage {
	return usage{Name: "ui", Summary: "print a one-time link to the web page (and open it): sessions, memories, dead letters, sweep",
		Help: `ask the running thatch for a link to its web page (hosts, sessions, memories, dead
letters, the sweep plan) and open it in a browser when one is at hand. The link opens the
page once, within a minute, and starts a session in that browser (until you sign out, it
is left unused for 12 hours, a day has passed, or thatch stops); run thatch ui again for
another browser. The link carries no token. The page is served by thatch serve on
THATCH_HTTP_LISTEN (default 127.0.0.1:4224).`}
}

func (u *uiCommand) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&u.noOpen, "no-open", false, "print the link only")
}

// uiLink is the answer of the ui.link method.
type uiLink struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Run asks the daemon for a one-time link, prints it and opens it when it can.
func (u *uiCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	raw, err := request(ctx, c, protocol.APIUILink, struct{}{})
	var herr *protocol.Error
	switch {
	case errors.As(err, &herr) && herr.Name == protocol.NotFound && strings.Contains(herr.Message, "no API method"):
		return fmt.Errorf("the running thatch is older than its one-time links: restart thatch serve with this build")
	case errors.As(err, &herr) && herr.Name == protocol.NotImplemented:
		return errors.New(herr.Message)
	case err != nil:
		return err
	}
	var link uiLink
	if err := json.Unmarshal(raw, &link); err != nil || link.URL == "" {
		return fmt.Errorf("ui.link answered what thatch ui cannot read (%s)", raw)
	}
	fmt.Fprintln(out, link.URL)
	if !u.noOpen {
		if opener := browserOpener(); opener != "" {
			if err := exec.Command(opener, link.URL).Start(); err == nil {
				fmt.Fprintf(out, "opened in your browser (%s); the link is used: run thatch ui again for another browser\n", opener)
				return nil
			}
		}
	}
	fmt.Fprintln(out, "(opens the page once, within a minute: run thatch ui again for a new one)")
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
