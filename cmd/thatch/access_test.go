package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/adapters/opencode"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/cmd/internal/daemon/daemontest"
	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// Contract §7, access to the broker: only thatch's owner, and the hosts they hand the
// token (or, on an external broker, a user) to, talk to thatch.

// writeTestCert writes a self-signed certificate for 127.0.0.1 and localhost, and its key,
// into dir.
func writeTestCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
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
	must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	must(t, os.WriteFile(certFile, pemBlock("CERTIFICATE", der), 0o600))
	must(t, os.WriteFile(keyFile, pemBlock("EC PRIVATE KEY", keyDER), 0o600))
	return certFile, keyFile
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// embeddedConfig is the defaults with the embedded broker (no THATCH_NATS_URL) on a free
// loopback port and a data folder of the test's own.
func embeddedConfig(t *testing.T) daemon.Config {
	t.Helper()
	c, err := daemon.LoadConfig()
	must(t, err)
	c.DataDir = filepath.Join(t.TempDir(), "data")
	c.NATSURL, c.NATSListen = "", fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.InstallCommands, c.HostTimeoutMS, c.ShimListen = false, 2000, fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return c
}

// startServe runs thatch serve in process until the test ends (or stop is called), and
// waits until the CLI, with c as its configuration and nothing else, gets its status.
func startServe(t *testing.T, c daemon.Config, log *slog.Logger) (stop func()) {
	t.Helper()
	return daemontest.Serve(t, c, log, nil, "thatch to answer the CLI", func() error {
		if cliStatus(c) == nil {
			return errors.New("thatch status --json fails")
		}
		return nil
	})
}

// cliStatus is thatch status --json as the CLI gets it with c, nil when it fails.
func cliStatus(c daemon.Config) *runtime.StatusView {
	var out bytes.Buffer
	if err := client(context.Background(), c, "status", []string{"--json"}, &out); err != nil {
		return nil
	}
	var st runtime.StatusView
	if json.Unmarshal(out.Bytes(), &st) != nil {
		return nil
	}
	return &st
}

// envVars runs thatch env with c and returns its assignments.
func envVars(t *testing.T, c daemon.Config) map[string]string {
	t.Helper()
	var out bytes.Buffer
	must(t, client(context.Background(), c, "env", nil, &out))
	vars := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			vars[k] = v
		}
	}
	return vars
}

// checkStatusFileHasNoToken waits for thatch's status file and checks the token is not in it.
func checkStatusFileHasNoToken(t *testing.T, c daemon.Config, token string) {
	t.Helper()
	path := filepath.Join(c.DataDir, daemon.StatusFile)
	waitFor(t, "the status file", func() bool { _, err := os.Stat(path); return err == nil })
	data, err := os.ReadFile(path)
	must(t, err)
	if strings.Contains(string(data), token) {
		t.Fatalf("the status file holds the broker token:\n%s", data)
	}
}

// TestAccessEmbeddedBroker: the embedded broker refuses a connection without its token;
// the token is made at the first start (0600, 64 random characters) and kept across
// restarts; a host given thatch env's URL works, and the CLI and thatch bridge work with
// no set-up; the status file never holds the token.
func TestAccessEmbeddedBroker(t *testing.T) {
	c := embeddedConfig(t)
	stop := startServe(t, c, testkit.Logger(t))

	fi, err := os.Stat(c.TokenPath())
	must(t, err)
	token, err := natsbus.ReadToken(c.TokenPath())
	must(t, err)
	if fi.Mode().Perm() != 0o600 || len(token) < natsbus.MinTokenLen {
		t.Fatalf("token file mode %v, %d characters: want 0600 and at least %d", fi.Mode().Perm(), len(token), natsbus.MinTokenLen)
	}
	for name, opts := range map[string][]nats.Option{"no token": nil, "a wrong token": {nats.Token(strings.Repeat("0", 64))}} {
		nc, err := nats.Connect("nats://"+c.NATSListen, opts...)
		if err == nil {
			nc.Close()
			t.Fatalf("%s: the embedded broker took the connection", name)
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("%s: %v, want an authorization violation", name, err)
		}
	}

	vars := envVars(t, c)
	want := fmt.Sprintf("nats://%s@%s", token, c.NATSListen)
	if vars["THATCH_NATS_URL"] != want || vars["THATCH_SUBJECT_PREFIX"] != "opencode" || vars["THATCH_API_PREFIX"] != "thatch" {
		t.Fatalf("thatch env: %v, want THATCH_NATS_URL=%s and the prefixes", vars, want)
	}
	nc, err := nats.Connect(vars["THATCH_NATS_URL"])
	must(t, err)
	t.Cleanup(nc.Close)
	h, err := fakehost.New(nc, "h1", "v1")
	must(t, err)
	t.Cleanup(h.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must(t, h.Hello(ctx, "b1"))
	must(t, h.Created(ctx, "ses_a", "", "t", t.TempDir()))
	must(t, h.ToolExecuted(ctx, "ses_a", "c1", "bash", "x"))
	waitFor(t, "the host's events, seen through the CLI", func() bool { st := cliStatus(c); return st != nil && st.Applied == 3 })
	var out bytes.Buffer
	must(t, client(ctx, c, "entries", []string{"ses_a"}, &out))
	if !strings.Contains(out.String(), "c1") {
		t.Fatalf("thatch entries ses_a printed %q", out.String())
	}

	// thatch status says where the token is; another token is refused, saying where
	// thatch's is.
	out.Reset()
	must(t, client(ctx, c, "status", nil, &out))
	if !strings.Contains(squash(out.String()), "broker token "+c.TokenPath()) {
		t.Errorf("thatch status does not say where the token is:\n%s", out.String())
	}
	// Refused is not unreachable, even with a status file to fall back to.
	waitFor(t, "the status file", func() bool { _, err := os.Stat(filepath.Join(c.DataDir, daemon.StatusFile)); return err == nil })
	wrong := c
	wrong.NATSToken = strings.Repeat("1", 64)
	if err := client(ctx, wrong, "status", nil, &out); err == nil || !strings.Contains(err.Error(), "refused thatch's token") ||
		!strings.Contains(err.Error(), c.TokenPath()) {
		t.Errorf("the CLI with another THATCH_NATS_TOKEN: %v, want a refusal naming the token's file", err)
	}

	// thatch bridge next to it, with no set-up: it answers its host API on the broker.
	b := c
	oc, _ := newFakeOpencode(t, false)
	b.OpencodeURL = oc.srv.URL // the bridge serves its host API while opencode is up
	bctx, bcancel := context.WithCancel(context.Background())
	bdone := make(chan error, 1)
	blog := testkit.Logger(t)
	go func() { bdone <- daemon.Bridge(bctx, b, blog) }()
	subject := "opencode." + opencode.HostIDFor(b.OpencodeURL) + ".api.session.list"
	waitFor(t, "thatch bridge to answer "+subject, func() bool {
		_, err := nc.Request(subject, []byte(`{}`), time.Second)
		return err == nil
	})
	bcancel()
	must(t, <-bdone)

	checkStatusFileHasNoToken(t, c, token)
	stop()
	startServe(t, c, testkit.Logger(t))
	if again, err := natsbus.ReadToken(c.TokenPath()); err != nil || again != token {
		t.Fatalf("after a restart the token is %q (%v), want the same", again, err)
	}
}

// TestAccessTokenVariable: THATCH_NATS_TOKEN replaces the file's token for the broker, and
// the file is made all the same.
func TestAccessTokenVariable(t *testing.T) {
	c := embeddedConfig(t)
	c.NATSToken = strings.Repeat("t", 40)
	startServe(t, c, testkit.Logger(t))
	nc, err := nats.Connect("nats://"+c.NATSListen, nats.Token(c.NATSToken))
	must(t, err)
	nc.Close()
	fileToken, err := natsbus.ReadToken(c.TokenPath())
	must(t, err)
	if nc, err := nats.Connect("nats://"+c.NATSListen, nats.Token(fileToken)); err == nil {
		nc.Close()
		t.Fatal("the file's token opened a broker that THATCH_NATS_TOKEN guards")
	}
	if got := envVars(t, c)["THATCH_NATS_URL"]; got != "nats://"+c.NATSToken+"@"+c.NATSListen {
		t.Fatalf("thatch env: THATCH_NATS_URL=%s", got)
	}
	var help bytes.Buffer
	if err := client(context.Background(), c, "env", []string{"--help"}, &help); err != nil || !strings.Contains(help.String(), "keep it private") {
		t.Fatalf("thatch env --help: %v\n%s", err, help.String())
	}
}

// TestAccessConfigRefusesOpenListeners: beyond loopback the broker needs TLS and the shim
// may not go at all; the error names the variables to set. Loopback and TLS pass.
func TestAccessConfigRefusesOpenListeners(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want []string // in the error; none: loads
	}{
		{map[string]string{"THATCH_NATS_LISTEN": "0.0.0.0:4222"}, []string{"THATCH_NATS_LISTEN", "THATCH_NATS_TLS_CERT", "THATCH_NATS_TLS_KEY"}},
		{map[string]string{"THATCH_NATS_LISTEN": ":4222"}, []string{"THATCH_NATS_TLS_CERT", "THATCH_NATS_TLS_KEY"}},
		{map[string]string{"THATCH_NATS_LISTEN": "192.0.2.7:4222"}, []string{"THATCH_NATS_TLS_CERT", "THATCH_NATS_TLS_KEY"}},
		{map[string]string{"THATCH_NATS_LISTEN": "0.0.0.0:4222", "THATCH_NATS_TLS_CERT": "c.pem"}, []string{"THATCH_NATS_TLS_CERT", "THATCH_NATS_TLS_KEY", "both"}},
		{map[string]string{"THATCH_NATS_URL": "nats://127.0.0.1:4222", "THATCH_NATS_TLS_CERT": "c.pem", "THATCH_NATS_TLS_KEY": "k.pem"}, []string{"THATCH_NATS_URL", "THATCH_NATS_TLS_CERT"}},
		{map[string]string{"THATCH_SHIM_LISTEN": "0.0.0.0:4223"}, []string{"THATCH_SHIM_LISTEN", "keep it on loopback"}},
		{map[string]string{"THATCH_SHIM_LISTEN": "[::]:4223"}, []string{"THATCH_SHIM_LISTEN", "keep it on loopback"}},
		{map[string]string{"THATCH_NATS_TOKEN": "short"}, []string{"THATCH_NATS_TOKEN", "32"}},
		{map[string]string{"THATCH_HTTP_LISTEN": "0.0.0.0:4224"}, []string{"THATCH_HTTP_LISTEN", "THATCH_HTTP_TLS_CERT", "THATCH_HTTP_TLS_KEY", "off"}},
		{map[string]string{"THATCH_HTTP_LISTEN": ":4224"}, []string{"THATCH_HTTP_LISTEN", "THATCH_HTTP_TLS_CERT"}},
		{map[string]string{"THATCH_HTTP_LISTEN": "0.0.0.0:4224", "THATCH_HTTP_TLS_KEY": "k.pem"}, []string{"THATCH_HTTP_TLS_CERT", "THATCH_HTTP_TLS_KEY", "both"}},
		{map[string]string{"THATCH_HTTP_LISTEN": "example.com:4224"}, []string{"THATCH_HTTP_LISTEN", "IP address"}},
		{map[string]string{"THATCH_HTTP_LISTEN": "0.0.0.0:4224", "THATCH_HTTP_TLS_CERT": "c.pem", "THATCH_HTTP_TLS_KEY": "k.pem"}, nil},
		{map[string]string{"THATCH_HTTP_LISTEN": "OFF"}, nil},
		{map[string]string{"THATCH_HTTP_LISTEN": "127.0.0.1:4224"}, nil},
		{map[string]string{"THATCH_NATS_LISTEN": "0.0.0.0:4222", "THATCH_NATS_TLS_CERT": "c.pem", "THATCH_NATS_TLS_KEY": "k.pem"}, nil},
		{map[string]string{"THATCH_NATS_LISTEN": "[::1]:4222", "THATCH_SHIM_LISTEN": "localhost:4223"}, nil},
		{map[string]string{"THATCH_NATS_URL": "nats://127.0.0.1:4222", "THATCH_NATS_TOKEN": "short", "THATCH_NATS_LISTEN": "0.0.0.0:4222"}, nil},
	} {
		t.Run(fmt.Sprint(tc.env), func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := daemon.LoadConfig()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: does not say %q", err, w)
				}
			}
		})
	}
	// thatch serve itself stops at once, with the message main prints.
	t.Setenv("THATCH_DATA_DIR", t.TempDir())
	t.Setenv("THATCH_NATS_LISTEN", fmt.Sprintf("0.0.0.0:%d", freePort(t)))
	done := make(chan error, 1)
	go func() { done <- run([]string{"serve"}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "THATCH_NATS_TLS_CERT and THATCH_NATS_TLS_KEY") {
			t.Fatalf("thatch serve on 0.0.0.0 without TLS: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("thatch serve on 0.0.0.0 without TLS started")
	}
}

// TestTLSEmbeddedBroker: with a certificate the embedded broker serves TLS (forced here on
// loopback): a client that does not trust it is refused; a host trusting it connects and
// its events flow; the CLI connects over TLS with the daemon's variables, and without
// them through the status file.
func TestTLSEmbeddedBroker(t *testing.T) {
	c := embeddedConfig(t)
	c.NATSTLSCert, c.NATSTLSKey = writeTestCert(t, t.TempDir())
	startServe(t, c, testkit.Logger(t))
	token, err := natsbus.ReadToken(c.TokenPath())
	must(t, err)
	if nc, err := nats.Connect("nats://"+c.NATSListen, nats.Token(token)); err == nil {
		nc.Close()
		t.Fatal("a client that does not trust the certificate connected")
	}
	vars := envVars(t, c)
	if want := fmt.Sprintf("tls://%s@%s", token, c.NATSListen); vars["THATCH_NATS_URL"] != want || vars["THATCH_NATS_TLS_CA"] != c.NATSTLSCert {
		t.Fatalf("thatch env: %v, want THATCH_NATS_URL=%s and THATCH_NATS_TLS_CA=%s", vars, want, c.NATSTLSCert)
	}
	nc, err := nats.Connect(vars["THATCH_NATS_URL"], nats.RootCAs(vars["THATCH_NATS_TLS_CA"]))
	must(t, err)
	t.Cleanup(nc.Close)
	if !nc.TLSRequired() {
		t.Fatal("the host's connection is not TLS")
	}
	h, err := fakehost.New(nc, "h1", "v1")
	must(t, err)
	t.Cleanup(h.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must(t, h.Hello(ctx, "b1"))
	must(t, h.Created(ctx, "ses_a", "", "t", t.TempDir()))
	waitFor(t, "the host's events over TLS", func() bool { st := cliStatus(c); return st != nil && st.Applied == 2 })

	bare := c // a shell without the TLS variables: the status file names the certificate
	bare.NATSTLSCert, bare.NATSTLSKey = "", ""
	waitFor(t, "the certificate in the status file", func() bool { return savedStatus(c).BrokerCert == c.NATSTLSCert })
	if st := cliStatus(bare); st == nil || st.Sessions != 1 {
		t.Fatalf("the CLI without the TLS variables: %+v", st)
	}
	checkStatusFileHasNoToken(t, c, token)
}

// TestAccessLogsHideURLCredentials: thatch serve bridging THATCH_OPENCODE_URL with a
// password in it (nothing listens there, so the bridge logs its failures with the URL)
// never writes the password, nor the user, to its log, in either format.
func TestAccessLogsHideURLCredentials(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			c := embeddedConfig(t)
			c.OpencodeURL = "http://opuser:secret@127.0.0.1:1"
			path := filepath.Join(t.TempDir(), "thatch.log")
			f, err := os.Create(path)
			must(t, err)
			defer f.Close()
			stop := startServe(t, c, daemon.NewLogger(f, "debug", format))
			waitFor(t, "the bridge to log its failure", func() bool {
				data, _ := os.ReadFile(path)
				return bytes.Contains(data, []byte("cannot stream opencode's events"))
			})
			stop()
			data, err := os.ReadFile(path)
			must(t, err)
			if bytes.Contains(data, []byte("secret")) || bytes.Contains(data, []byte("opuser")) {
				t.Fatalf("the log holds the URL's credentials:\n%s", data)
			}
			if !bytes.Contains(data, []byte("http://REDACTED@127.0.0.1:1")) {
				t.Fatalf("the log never names the URL, redacted:\n%s", data)
			}
		})
	}
}

// permissionsConf is the external-broker configuration of docs/security.md.
const permissionsConf = "../../testdata/nats/permissions.conf"

// asyncErrors collects a connection's asynchronous errors (permission violations).
type asyncErrors struct {
	mu   sync.Mutex
	errs []string
}

func (a *asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err.Error())
}

// refused waits until the broker reported a permission violation naming subject.
func (a *asyncErrors) refused(t *testing.T, what, subject string) {
	t.Helper()
	waitFor(t, "the broker to refuse "+what+" "+subject, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, e := range a.errs {
			if strings.Contains(strings.ToLower(e), "permissions violation for "+what) && strings.Contains(e, `"`+subject+`"`) {
				return true
			}
		}
		return false
	})
}

// TestAccessExternalPermissions runs docs/security.md's nats-server configuration
// (testdata/nats/permissions.conf), thatch on it by THATCH_NATS_URL, and two hosts: host-a
// goes through a whole extraction (thatch calls its API, it calls thatch's tools and
// session.context), host-b's events are applied; host-a cannot publish host-b's events,
// call host-b's API or thatch's other methods, purge the stream, or subscribe to what is
// not its own.
func TestAccessExternalPermissions(t *testing.T) {
	pw := map[string]string{}
	for _, user := range []string{"THATCH", "HOST_A", "HOST_B"} {
		tok, err := natsbus.NewToken()
		must(t, err)
		pw[user] = tok
		t.Setenv(user+"_PASSWORD", tok)
	}
	opts, err := server.ProcessConfigFile(permissionsConf)
	must(t, err)
	opts.Host, opts.Port, opts.StoreDir, opts.NoSigs, opts.NoLog = "127.0.0.1", -1, t.TempDir(), true, true
	ns, err := server.NewServer(opts)
	must(t, err)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	addr := strings.TrimPrefix(ns.ClientURL(), "nats://")
	thatchURL := fmt.Sprintf("nats://thatch:%s@%s", pw["THATCH"], addr)

	// A host connects as its user, with inboxes of its own.
	connect := func(user, pass string) (*nats.Conn, *asyncErrors) {
		errs := &asyncErrors{}
		nc, err := nats.Connect("nats://"+addr, nats.UserInfo(user, pass), nats.CustomInboxPrefix("_INBOX."+user), nats.ErrorHandler(errs.handler))
		must(t, err)
		t.Cleanup(nc.Close)
		return nc, errs
	}
	ncA, errsA := connect("host-a", pw["HOST_A"])
	ncB, _ := connect("host-b", pw["HOST_B"])
	hostA, err := fakehost.New(ncA, "host-a", "v1")
	must(t, err)
	hostA.Dir = t.TempDir()
	t.Cleanup(hostA.Close)
	hostB, err := fakehost.New(ncB, "host-b", "v1")
	must(t, err)
	hostB.Dir = t.TempDir()
	t.Cleanup(hostB.Close)

	cfg, err := daemon.LoadConfig()
	must(t, err)
	cfg.DataDir, cfg.NATSURL, cfg.InstallCommands, cfg.StrandSweep, cfg.HostTimeoutMS = filepath.Join(t.TempDir(), "data"), thatchURL, false, false, 2000
	logPath := filepath.Join(t.TempDir(), "thatch.log")
	logf, err := os.Create(logPath)
	must(t, err)
	defer logf.Close()
	// The operator's CLI runs as thatch's user, with thatch's own configuration.
	admin, err := dialBroker(cfg)
	must(t, err)
	t.Cleanup(admin.Close)
	r := wrapRig(t, &daemontest.Rig{T: t, URL: thatchURL, DataDir: cfg.DataDir, NC: admin, Host: hostA, Cfg: cfg})
	r.log = daemon.NewLogger(logf, "debug", "json")
	r.start()
	ctx := r.ctx()

	// host-a, its whole extraction: its events; thatch's calls of its API; its calls of
	// thatch's tools and of session.context.
	child := r.extractionOfOneEntry(ctx)
	must(t, hostA.Status(ctx, child, "busy"))
	if got := strings.Join(entryIDs(r.tool(ctx, runtime.ToolPayload, child, map[string]any{})), ","); got != "c1" {
		t.Fatalf("host-a's extraction claimed %q, want c1", got)
	}
	r.tool(ctx, runtime.ToolDone, child, map[string]any{"new": 0, "updated": 0, "deleted": 0})
	if _, err := ncA.Request("thatch.api.session.context", []byte(`{"sessionID":"ses_a"}`), 5*time.Second); err != nil {
		t.Fatalf("host-a asking thatch.api.session.context: %v", err)
	}
	// host-b's events are applied.
	must(t, hostB.Hello(ctx, "b1"))
	must(t, hostB.Created(ctx, "ses_b", "", "t", hostB.Dir))
	waitFor(t, "host-b's session", func() bool { s, ok := r.sessions()["ses_b"]; return ok && s.HostID == "host-b" })

	// host-a forging host-b's event: the publish is refused and never reaches the stream.
	jsA, err := jetstream.New(ncA)
	must(t, err)
	forged := `{"id":"evt_forged","type":"session.created","properties":{"sessionID":"ses_forged","info":{"id":"ses_forged","title":"t","directory":"/"}}}`
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = jsA.Publish(pctx, "opencode.host-b.event.session.created", []byte(forged))
	cancel()
	if err == nil {
		t.Fatal("host-a published an event as host-b")
	}
	errsA.refused(t, "publish to", "opencode.host-b.event.session.created")

	// host-a calling host-b's API, or thatch's methods other than its own: refused.
	for _, subject := range []string{"opencode.host-b.api.session.prompt", "opencode.host-b.api.session.list",
		"thatch.api.status", "thatch.api.sessions", "thatch.api.entries", "thatch.api.sweep", "thatch.api.memories",
		"thatch.api.memory.forget", "thatch.api.memory.export", "$JS.API.STREAM.PURGE.OPENCODE_EVENTS", "$JS.API.STREAM.DELETE.OPENCODE_EVENTS"} {
		if _, err := ncA.Request(subject, []byte(`{"sessionID":"ses_b","text":"run this"}`), 300*time.Millisecond); err == nil {
			t.Errorf("host-a's request on %s was answered", subject)
		}
		errsA.refused(t, "publish to", subject)
	}
	for _, c := range hostB.Requests() {
		if c.Params["text"] == "run this" || c.Method == "session.list" {
			t.Fatalf("host-b received host-a's call: %v", c)
		}
	}
	// host-a listening to what is not its own: refused.
	for _, subject := range []string{">", "opencode.host-b.api.>", "thatch.tool.*", "thatch.api.>", "_INBOX.>", "_INBOX.host-b.>", "opencode.*.event.>"} {
		sub, err := ncA.Subscribe(subject, func(*nats.Msg) {})
		must(t, err)
		errsA.refused(t, "subscription to", subject)
		_ = sub.Unsubscribe()
	}

	// Whatever host-a tried, the stream, thatch and host-b go on: host-b's next event is
	// applied, and the forged session never appeared.
	must(t, hostB.Created(ctx, "ses_b2", "", "t", hostB.Dir))
	waitFor(t, "host-b's second session", func() bool { _, ok := r.sessions()["ses_b2"]; return ok })
	if _, ok := r.sessions()["ses_forged"]; ok {
		t.Fatal("host-a's forged event created a session")
	}
	r.stop()
	data, err := os.ReadFile(logPath)
	must(t, err)
	if bytes.Contains(data, []byte(pw["THATCH"])) {
		t.Fatal("thatch's log holds its broker password")
	}
}
