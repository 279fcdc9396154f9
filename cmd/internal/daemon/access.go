package daemon

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"

	"github.com/thatch-dev/thatch/adapters/natsbus"
)

// Who may talk to thatch (contract §7): the embedded broker requires a token, kept in the
// data folder, and TLS beyond loopback; the plugin shim stays on loopback.

// checkAccess refuses settings that would open thatch to the network without protection,
// naming the variables to set. It runs after checkListen, so the addresses parse.
func (c Config) checkAccess() error {
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		return fmt.Errorf("THATCH_NATS_TLS_CERT and THATCH_NATS_TLS_KEY go together: set both (the broker's certificate and its key), or neither")
	}
	if c.NATSURL != "" && c.NATSTLSCert != "" {
		return fmt.Errorf("THATCH_NATS_TLS_CERT and THATCH_NATS_TLS_KEY configure the embedded broker, and THATCH_NATS_URL means none runs: " +
			"unset them (THATCH_NATS_TLS_CA names the authority an external broker's certificate chains to)")
	}
	if c.NATSURL == "" && !isLoopback(c.NATSListen) && c.NATSTLSCert == "" {
		return fmt.Errorf("THATCH_NATS_LISTEN=%q is not a loopback address: set THATCH_NATS_TLS_CERT and THATCH_NATS_TLS_KEY so the broker serves TLS "+
			"(its token sent in clear over a network protects nothing), or listen on 127.0.0.1", c.NATSListen)
	}
	if c.NATSURL == "" && c.NATSToken != "" && !natsbus.ValidToken(c.NATSToken) {
		return fmt.Errorf("THATCH_NATS_TOKEN: the embedded broker's token must be at least %d characters without spaces; "+
			"unset it to use the one thatch keeps in THATCH_DATA_DIR/%s", natsbus.MinTokenLen, natsbus.TokenFile)
	}
	if (c.HTTPTLSCert == "") != (c.HTTPTLSKey == "") {
		return fmt.Errorf("THATCH_HTTP_TLS_CERT and THATCH_HTTP_TLS_KEY go together: set both (the endpoint's certificate and its key), or neither")
	}
	if c.HTTPOn() && !isLoopback(c.HTTPListen) && c.HTTPTLSCert == "" {
		return fmt.Errorf("THATCH_HTTP_LISTEN=%q is not a loopback address: set THATCH_HTTP_TLS_CERT and THATCH_HTTP_TLS_KEY so the endpoint serves HTTPS "+
			"(the web page's token and cookie sent in clear over a network protect nothing), listen on 127.0.0.1, or set it to off", c.HTTPListen)
	}
	if !isLoopback(c.ShimListen) {
		return fmt.Errorf("THATCH_SHIM_LISTEN=%q is not a loopback address: the plugin shim serves plain HTTP and opencode reaches it on this machine, "+
			"so keep it on loopback (e.g. 127.0.0.1:4223)", c.ShimListen)
	}
	return nil
}

// isLoopback reports whether a listen address (host:port, already checked) takes
// connections from this machine only. An empty host is every address.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// TokenPath is the broker token's file in the data folder.
func (c Config) TokenPath() string { return filepath.Join(c.DataDir, natsbus.TokenFile) }

// ClientToken is the token thatch's own connections present: THATCH_NATS_TOKEN; else, for
// the embedded broker, the one in the data folder ("" when no thatch has made one there
// yet: the broker then says what is missing). An external broker gets no token of thatch's
// own: its credentials are THATCH_NATS_URL's, THATCH_NATS_CREDS' or THATCH_NATS_TOKEN's.
func (c Config) ClientToken() (string, error) {
	if c.NATSToken != "" || c.NATSURL != "" {
		return c.NATSToken, nil
	}
	tok, err := natsbus.ReadToken(c.TokenPath())
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: run thatch as the user who runs thatch serve, or set THATCH_NATS_TOKEN", err)
	}
	return tok, nil
}

// TokenSource says where the embedded broker's token is, for people.
func (c Config) TokenSource() string {
	switch {
	case c.NATSURL != "":
		return "none: the external broker at THATCH_NATS_URL decides who connects"
	case c.NATSToken != "":
		return "THATCH_NATS_TOKEN"
	}
	return c.TokenPath()
}

// tlsFiles are the broker TLS files of the configuration.
func (c Config) tlsFiles() natsbus.TLSFiles {
	return natsbus.TLSFiles{Cert: c.NATSTLSCert, Key: c.NATSTLSKey, CA: c.NATSTLSCA}
}

// ClientTLS is the TLS configuration of thatch's own connections over the network: trusting
// THATCH_NATS_TLS_CA, else exactly the embedded broker's THATCH_NATS_TLS_CERT; nil without
// either.
func (c Config) ClientTLS() (*tls.Config, error) {
	return natsbus.ClientTLS(natsbus.TLSFiles{Cert: c.NATSTLSCert, CA: c.NATSTLSCA})
}
