package natsbus

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/thatch-dev/thatch/internal/keyfile"
)

// Access to the embedded broker (contract §7): a token every client presents, kept in the
// data folder, and TLS when the broker listens beyond loopback.

// TokenFile is the broker token's file in thatch's data folder.
const TokenFile = "broker.token"

// MinTokenLen is the shortest token thatch accepts for its embedded broker.
const MinTokenLen = 32

// NewToken returns a fresh random token: 64 hex digits from crypto/rand, safe in a URL, a
// shell and a NATS connect option as they are.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate a broker token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidToken reports whether tok can be the embedded broker's token: at least MinTokenLen
// characters, none of them a space or a control character.
func ValidToken(tok string) bool {
	return len(tok) >= MinTokenLen && !strings.ContainsFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
}

// EnsureToken returns the token kept at path, creating the file (mode 0600, its folder
// 0700) when it is absent. An unsafe token gets a new one in its place: too short or
// holding spaces, readable by other accounts (it may have been copied already), in a file
// that is a link, not a regular file, or another user's. These are the rules of the shim
// token (commands.EnsureToken), both keyfile's. A sound token in a file of another private
// mode (0400, 0700) is kept and made 0600. fixed says, for the log, what was done besides
// creating the file; "" when nothing was.
func EnsureToken(path string) (token, fixed string, err error) {
	r, err := keyfile.Ensure(path, keyfile.Rules{Name: "the broker token", Check: checkToken, New: NewToken})
	switch r.Action {
	case keyfile.Replaced:
		fixed = fmt.Sprintf("the broker token in %s was unsafe (%s): wrote a new one; hosts need it (thatch env prints it)", path, r.Problem)
	case keyfile.MadePrivate:
		fixed = fmt.Sprintf("the broker token in %s had mode %04o: made it 0600", path, r.Mode)
	}
	return r.Secret, fixed, err
}

// checkToken says why tok cannot be the broker's token (ValidToken), "" when it can.
func checkToken(tok string) string {
	if !ValidToken(tok) {
		return fmt.Sprintf("%d characters, fewer than %d, or spaces", len(tok), MinTokenLen)
	}
	return ""
}

// ReadToken returns the token kept at path. A missing file is an error wrapping
// fs.ErrNotExist: no thatch has started on that data folder yet.
func ReadToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the broker token: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// TLSFiles name the embedded broker's certificate and key (PEM), and the authority its
// clients trust instead of that certificate.
type TLSFiles struct {
	Cert, Key, CA string
}

// serverTLS is the TLS configuration the embedded broker serves with.
func serverTLS(f TLSFiles) (*tls.Config, error) {
	cfg, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: f.Cert, KeyFile: f.Key})
	if err != nil {
		return nil, fmt.Errorf("THATCH_NATS_TLS_CERT=%s, THATCH_NATS_TLS_KEY=%s: %w", f.Cert, f.Key, err)
	}
	return cfg, nil
}

// ClientTLS is the TLS configuration of thatch's own connections to its broker. With a CA,
// the broker's certificate must chain to it and name the address dialled, as usual. With
// only the certificate, the broker must present exactly that certificate (or one it
// signed), whatever address is dialled: thatch holds the very file its broker serves, so
// the pin is stronger than a name check, and a broker on 0.0.0.0 is reachable as
// 127.0.0.1. Without either, nil.
func ClientTLS(f TLSFiles) (*tls.Config, error) {
	switch {
	case f.CA != "":
		pool, err := certPool(f.CA)
		if err != nil {
			return nil, fmt.Errorf("THATCH_NATS_TLS_CA=%s: %w", f.CA, err)
		}
		return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
	case f.Cert != "":
		pool, err := certPool(f.Cert)
		if err != nil {
			return nil, fmt.Errorf("THATCH_NATS_TLS_CERT=%s: %w", f.Cert, err)
		}
		return &tls.Config{
			MinVersion: tls.VersionTLS12,
			// Go's name check is off: VerifyConnection below checks the chain against
			// the pinned certificate instead, which no other server can present.
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("the broker presented no certificate")
				}
				opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool()}
				for _, c := range cs.PeerCertificates[1:] {
					opts.Intermediates.AddCert(c)
				}
				if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
					return fmt.Errorf("the broker's certificate is not the one in %s: %w", f.Cert, err)
				}
				return nil
			},
		}, nil
	}
	return nil, nil
}

// certPool reads every certificate of a PEM file.
func certPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("no PEM certificate in the file")
	}
	return pool, nil
}

// urlUserinfo matches the scheme and the userinfo of a URL (scheme://user:pass@ or
// scheme://token@), up to the last @ before the host; the host is not part of the match.
var urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#@\s"'<>\\]*(?:@[^/?#@\s"'<>\\]*)*@`)

// RedactURLs replaces the credentials of every URL in s (comma-separated lists and URLs
// inside longer text included) by REDACTED: scheme://REDACTED@host. Text without a URL
// that carries credentials comes back as it is.
func RedactURLs(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	return urlUserinfo.ReplaceAllString(s, "${1}REDACTED@")
}
