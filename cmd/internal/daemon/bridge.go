package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/adapters/opencode"
)

// newBridge makes the opencode server at c.OpencodeURL a protocol host on nc.
func newBridge(c Config, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) *opencode.Bridge {
	tokenFile, _, err := ensureShimToken(c.DataDir, log)
	if err != nil {
		log.Warn("the plugin shim endpoint is off: no token", "err", err)
	}
	log = log.With("component", "bridge")
	return &opencode.Bridge{Client: &opencode.Client{BaseURL: c.OpencodeURL, Password: c.OpencodePassword, Log: log},
		NC: nc, JS: js, Prefix: c.SubjectPrefix, APIPrefix: c.APIPrefix, HostID: opencode.HostIDFor(c.OpencodeURL),
		ShimListen: c.ShimListen, TokenFile: tokenFile, Log: log,
		PluginPath: filepath.Join(c.OpencodeDir, "plugin", "thatch.js")}
}

// Bridge runs the opencode bridge on its own (thatch bridge) until ctx ends.
func Bridge(ctx context.Context, c Config, log *slog.Logger) error {
	if c.OpencodeURL == "" {
		return fmt.Errorf("set THATCH_OPENCODE_URL to the opencode server to bridge (e.g. http://127.0.0.1:4096)")
	}
	token, err := c.ClientToken()
	if err != nil {
		return err
	}
	clientTLS, err := BrokerTLS(c)
	if err != nil {
		return err
	}
	// Its own inboxes, so that a broker's permissions can keep each host's replies to it
	// (docs/security.md's permissions.conf).
	nc, err := natsbus.Connect(natsbus.ConnectOptions{URL: c.BrokerURL(), CredsFile: c.NATSCreds, Token: token, TLS: clientTLS,
		Name: "thatch-bridge", InboxPrefix: "_INBOX." + opencode.HostIDFor(c.OpencodeURL)}, log.With("component", "nats"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	b := newBridge(c, nc, js, log)
	// thatch parks the calls that found no responder while this connection was down (it
	// restarted with its embedded broker) until the host's next hello: say it again.
	logReconnect := nc.ReconnectHandler()
	nc.SetReconnectHandler(func(nc *nats.Conn) {
		if logReconnect != nil {
			logReconnect(nc)
		}
		b.Rehello()
	})
	return b.Run(ctx)
}
