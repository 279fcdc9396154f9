package natsbus

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/internal/testkit"
)

// testCert writes a self-signed certificate for 127.0.0.1 and localhost, and its key, into
// dir and returns their paths.
func testCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "thatch test broker"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestBrokerRequiresToken: a broker started with a token refuses every client without it
// and takes the ones that present it, over the network and in process.
func TestBrokerRequiresToken(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:-1", Dir: t.TempDir(), Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	for name, opts := range map[string][]nats.Option{
		"no token":    nil,
		"wrong token": {nats.Token(strings.Repeat("x", 64))},
	} {
		if nc, err := nats.Connect(ns.ClientURL(), opts...); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.Token(tok))
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	nc.Close()
	// The URL form a host is given (thatch env).
	nc, err = nats.Connect(strings.Replace(ns.ClientURL(), "nats://", "nats://"+tok+"@", 1))
	if err != nil {
		t.Fatalf("with the token in the URL: %v", err)
	}
	nc.Close()
	nc, err = Connect(ConnectOptions{Embedded: ns, Token: tok, Name: "test"}, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatalf("in process with the token: %v", err)
	}
}

// TestBrokerTLS: a broker with a certificate requires TLS over the network: a client that
// does not trust the certificate is refused, one that pins it (thatch's own, by address or
// name) or trusts it as a CA (a host) connects; in process, thatch needs no TLS.
func TestBrokerTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := testCert(t, dir)
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:-1", Dir: filepath.Join(dir, "store"), Token: tok, TLS: TLSFiles{Cert: cert, Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !strings.HasPrefix(ns.ClientURL(), "tls://") {
		t.Fatalf("client URL %s, want tls://", ns.ClientURL())
	}
	addr := strings.TrimPrefix(ns.ClientURL(), "tls://")
	_, port, _ := net.SplitHostPort(addr)
	if nc, err := nats.Connect("nats://"+addr, nats.Token(tok)); err == nil {
		nc.Close()
		t.Error("a client that does not trust the certificate connected")
	}
	pinned, err := ClientTLS(TLSFiles{Cert: cert})
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{"nats://" + addr, "tls://localhost:" + port} {
		nc, err := Connect(ConnectOptions{URL: url, Token: tok, TLS: pinned, Name: "pinned"}, testkit.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil || !nc.TLSRequired() {
			t.Errorf("pinned client at %s: %v (TLS %v)", url, err, nc.TLSRequired())
		}
		nc.Close()
	}
	nc, err := nats.Connect("nats://"+addr, nats.Token(tok), nats.RootCAs(cert))
	if err != nil {
		t.Fatalf("a host trusting the certificate: %v", err)
	}
	nc.Close()
	// A pin of another certificate is refused.
	other, _ := testCert(t, t.TempDir())
	wrong, err := ClientTLS(TLSFiles{Cert: other})
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect("nats://"+addr, nats.Token(tok), nats.Secure(wrong)); err == nil {
		nc.Close()
		t.Error("a client pinning another certificate connected")
	}
	nc, err = Connect(ConnectOptions{Embedded: ns, Token: tok, TLS: pinned, Name: "in process"}, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatalf("in process: %v", err)
	}
	if _, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:-1", Dir: t.TempDir(), TLS: TLSFiles{Cert: cert, Key: other}}); err == nil ||
		!strings.Contains(err.Error(), "THATCH_NATS_TLS_CERT") || !strings.Contains(err.Error(), "THATCH_NATS_TLS_KEY") {
		t.Errorf("a certificate with a key that is not its own: %v, want an error naming the variables", err)
	}
}

// TestEnsureToken: the token is made once (0600, random, long enough) and kept; an unsafe
// one (short, readable by others, a link) is replaced and a private but loose mode fixed,
// each saying so.
func TestEnsureToken(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "data", TokenFile)
	tok, fixed, err := EnsureToken(path)
	if err != nil || fixed != "" || !ValidToken(tok) || len(tok) < MinTokenLen {
		t.Fatalf("first: %q %q %v", tok, fixed, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", fi.Mode(), err)
	}
	again, fixed, err := EnsureToken(path)
	if err != nil || again != tok || fixed != "" {
		t.Fatalf("second: %q %q %v, want the same token", again, fixed, err)
	}
	if other, _ := NewToken(); other == tok {
		t.Fatal("two tokens are equal")
	}
	if read, err := ReadToken(path); err != nil || read != tok {
		t.Fatalf("ReadToken: %q %v", read, err)
	}

	own := strings.Repeat("k", 40)
	for _, c := range []struct {
		name  string
		setup func()
		kept  bool
		said  string
	}{
		{"short", func() { must(os.WriteFile(path, []byte("short\n"), 0o600)) }, false, "fewer than 32"},
		{"readable by others", func() { must(os.WriteFile(path, []byte(own+"\n"), 0o600)); must(os.Chmod(path, 0o644)) }, false, "readable by other accounts"},
		{"a link", func() {
			target := filepath.Join(t.TempDir(), "elsewhere")
			must(os.WriteFile(target, []byte(own), 0o600))
			must(os.Remove(path))
			must(os.Symlink(target, path))
		}, false, "symbolic link"},
		{"mode 0400", func() { must(os.Remove(path)); must(os.WriteFile(path, []byte(own+"\n"), 0o400)) }, true, "made it 0600"},
	} {
		c.setup()
		got, fixed, err := EnsureToken(path)
		if err != nil || !strings.Contains(fixed, c.said) || (got == own) != c.kept || !ValidToken(got) {
			t.Errorf("%s: token %q, %q, %v; want kept=%v and a note saying %q", c.name, got, fixed, err, c.kept, c.said)
		}
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: afterwards %v (%v), want a regular file of mode 0600", c.name, fi.Mode(), err)
		}
	}
	if _, err := ReadToken(filepath.Join(t.TempDir(), TokenFile)); err == nil {
		t.Fatal("ReadToken of a missing file succeeded")
	}
}

// TestRedactURLs: the credentials of every URL go, whatever the scheme and wherever the URL
// sits in the text; the rest stays.
func TestRedactURLs(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://tok@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"http://user:secret@127.0.0.1:1/global/event", "http://REDACTED@127.0.0.1:1/global/event"},
		{"nats://a:b@h1:4222,nats://h2:4222, tls://c@h3:4222", "nats://REDACTED@h1:4222,nats://h2:4222, tls://REDACTED@h3:4222"},
		{`Get "http://u:p@ss@10.0.0.1:4096/x?y=z@w": refused`, `Get "http://REDACTED@10.0.0.1:4096/x?y=z@w": refused`},
		{"http://user:***@127.0.0.1:1", "http://REDACTED@127.0.0.1:1"},
		{"mail me at someone@example.com, see http://example.com/a@b", "mail me at someone@example.com, see http://example.com/a@b"},
		{"", ""},
	} {
		if got := RedactURLs(c.in); got != c.want {
			t.Errorf("RedactURLs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
