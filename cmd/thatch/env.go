package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/adapters/opencode"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
)

// envCommand is thatch env: what a host needs to reach this thatch.
type envCommand struct{}

func (*envCommand) Usage() usage {
	return usage{Name: "env", Summary: "what a host needs to connect: the broker URL with its token, the prefixes",
		Help: `print, as shell assignments, what a protocol host (or thatch bridge in another shell)
needs to reach this thatch: THATCH_NATS_URL with the embedded broker's token (from
$THATCH_DATA_DIR/broker.token, made if absent, or THATCH_NATS_TOKEN), the certificate
to trust when the broker serves TLS, and the subject prefixes. The output holds the
token: keep it private. With THATCH_NATS_URL, the external broker's own users apply.`}
}

func (*envCommand) Flags(*flag.FlagSet) {}

// Run prints, as shell assignments, what a protocol host (or a thatch bridge in another
// shell) needs to reach this thatch: the broker URL with the embedded broker's token, the
// subject prefixes, and the certificate to trust when the broker serves TLS (§7). It makes
// the token when no thatch serve has yet, logging what it fixed in the token's file.
func (*envCommand) Run(_ context.Context, c daemon.Config, out io.Writer, _ []string) error {
	log := daemon.NewLogger(os.Stderr, c.LogLevel, c.LogFormat)
	w := &strings.Builder{}
	if c.NATSURL != "" {
		fmt.Fprintf(w, "# thatch uses the external broker at THATCH_NATS_URL: who connects is that broker's business.\n"+
			"# Give each host a user of its own there (docs/security.md, testdata/nats/permissions.conf) and put it in this URL.\n")
		fmt.Fprintf(w, "THATCH_NATS_URL=%s\n", shellQuote(shownURL(c.NATSURL)))
		if c.NATSTLSCA != "" {
			fmt.Fprintf(w, "THATCH_NATS_TLS_CA=%s\n", shellQuote(c.NATSTLSCA))
		}
	} else {
		token := c.NATSToken
		if token == "" {
			tok, fixed, err := natsbus.EnsureToken(c.TokenPath())
			if err != nil {
				return err
			}
			if fixed != "" {
				log.Warn(fixed)
			}
			token = tok
		}
		host, port, _ := net.SplitHostPort(c.NATSListen) // checked at load
		if port == "0" || port == "-1" {
			// A free port picked at start: the running daemon's status file has it.
			if u, err := url.Parse(savedStatus(c).BrokerURL); err == nil && u.Port() != "" {
				port = u.Port()
			}
		}
		ip := net.ParseIP(host)
		anyAddress := host == "" || ip != nil && ip.IsUnspecified()
		if anyAddress {
			host = "127.0.0.1"
			if name, err := os.Hostname(); err == nil && name != "" {
				host = name
			}
		}
		scheme := "nats"
		if c.NATSTLSCert != "" {
			scheme = "tls"
		}
		u := url.URL{Scheme: scheme, User: url.User(token), Host: net.JoinHostPort(host, port)}
		fmt.Fprintf(w, "# What a host needs to reach this thatch. Keep it private: the URL holds the broker's token (%s).\n", c.TokenSource())
		if anyAddress {
			fmt.Fprintf(w, "# THATCH_NATS_LISTEN=%s takes every address: a host elsewhere uses one of this machine's that the certificate names.\n", c.NATSListen)
		}
		fmt.Fprintf(w, "THATCH_NATS_URL=%s\n", shellQuote(u.String()))
		switch {
		case c.NATSTLSCA != "":
			fmt.Fprintf(w, "THATCH_NATS_TLS_CA=%s\n", shellQuote(c.NATSTLSCA))
		case c.NATSTLSCert != "":
			fmt.Fprintf(w, "# the broker's certificate, for a host to trust:\nTHATCH_NATS_TLS_CA=%s\n", shellQuote(c.NATSTLSCert))
		}
	}
	fmt.Fprintf(w, "THATCH_SUBJECT_PREFIX=%s\nTHATCH_API_PREFIX=%s\n", c.SubjectPrefix, c.APIPrefix)
	if c.OpencodeURL != "" {
		fmt.Fprintf(w, "# the opencode bridge of THATCH_OPENCODE_URL is host %s: it publishes %s.%s.event.> and serves %s.%s.api.>\n",
			opencode.HostIDFor(c.OpencodeURL), c.SubjectPrefix, opencode.HostIDFor(c.OpencodeURL), c.SubjectPrefix, opencode.HostIDFor(c.OpencodeURL))
	}
	_, err := io.WriteString(out, w.String())
	return err
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
