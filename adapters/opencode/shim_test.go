package opencode

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/runtime"
)

// testToken is a shim token the bridge accepts (commands.MinTokenLen characters or more).
const testToken = "tok-0123456789abcdef0123456789abcdef"

// startShim serves a bridge's plugin shim within lim for one test, its token testToken.
func startShim(t *testing.T, lim ShimLimits) (b *Bridge, addr, tokenFile string) {
	t.Helper()
	nc, js, _ := broker(t)
	tokenFile = filepath.Join(t.TempDir(), "shim.token")
	must(t, os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600))
	addr = freeAddr(t)
	b = &Bridge{NC: nc, JS: js, Prefix: "opencode", APIPrefix: "thatch", HostID: "oc-test", ShimListen: addr,
		TokenFile: tokenFile, ShimLimits: lim, Log: testkit.Logger(t)}
	srv, err := b.serveShim()
	must(t, err)
	t.Cleanup(func() { srv.Close() })
	return b, addr, tokenFile
}

// rawPost is an HTTP/1.1 POST that keeps its connection alive, as bytes on the wire.
func rawPost(path, token, body string) string {
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: shim\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, len(body))
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	return req + "\r\n" + body
}

// exchange sends raw on conn and reads the answer, waiting at most wait.
func exchange(t *testing.T, conn net.Conn, r *bufio.Reader, raw string, wait time.Duration) (*http.Response, string, error) {
	t.Helper()
	if _, err := io.WriteString(conn, raw); err != nil {
		return nil, "", err
	}
	must(t, conn.SetReadDeadline(time.Now().Add(wait)))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return nil, "", err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(data), err
}

// closedByServer says whether the server closes conn within wait (the read ends in EOF
// or a reset, not in the deadline).
func closedByServer(t *testing.T, conn net.Conn, r *bufio.Reader, wait time.Duration) bool {
	t.Helper()
	must(t, conn.SetReadDeadline(time.Now().Add(wait)))
	_, err := r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn, bufio.NewReader(conn)
}

// A connection that keeps alive doing nothing is closed after the idle timeout, and one
// that never sends a request after the header timeout: neither holds a goroutine and a
// file descriptor for ever. The other timeouts stay long, so only the shortened one can
// close the connection within the wait.
func TestShimClosesIdleConnections(t *testing.T) {
	t.Run("kept alive", func(t *testing.T) {
		_, addr, _ := startShim(t, ShimLimits{Idle: 200 * time.Millisecond})
		conn, r := dial(t, addr)
		resp, _, err := exchange(t, conn, r, rawPost("/tool/bash", testToken, `{}`), 5*time.Second)
		if err != nil || resp.StatusCode != http.StatusNotFound || resp.Close {
			t.Fatalf("a request: %v %v, want a 404 that keeps the connection", resp, err)
		}
		if !closedByServer(t, conn, r, 5*time.Second) {
			t.Fatal("an idle kept-alive connection is still open after 5 s; the idle timeout is 200 ms")
		}
	})
	t.Run("silent", func(t *testing.T) {
		_, addr, _ := startShim(t, ShimLimits{ReadHeader: 200 * time.Millisecond})
		conn, r := dial(t, addr)
		if !closedByServer(t, conn, r, 5*time.Second) {
			t.Fatal("a connection that sent nothing is still open after 5 s; the header timeout is 200 ms")
		}
	})
}

// No more than MaxConns connections are served at once: the next one waits until one of
// them closes, and is then served.
func TestShimConnectionCap(t *testing.T) {
	_, addr, _ := startShim(t, ShimLimits{MaxConns: 2})
	held1, _ := dial(t, addr)
	dial(t, addr) // the second held connection
	conn, r := dial(t, addr)
	_, _, err := exchange(t, conn, r, rawPost("/tool/bash", testToken, `{}`), 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the third connection, while two are held, was answered (%v); want it to wait", err)
	}
	held1.Close()
	must(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the third connection once one held closed: %v %v, want its 404", resp, err)
	}
	resp.Body.Close()
}

// A body over the endpoint's limit is refused with 413, whether it says its length or is
// chunked, and nothing is published.
func TestShimRefusesOversizedBodies(t *testing.T) {
	b, addr, _ := startShim(t, ShimLimits{})
	big := func(n int) string { return `{"type":"x","properties":{"s":"` + strings.Repeat("a", n) + `"}}` }
	for _, c := range []struct {
		name, path, body string
		chunked          bool
	}{
		{"event", "/event", big(maxShimEvent), false},
		{"chunked event", "/event", big(maxShimEvent), true},
		{"tool call", "/tool/memory_search", big(maxShimRequest), false},
		{"context method", "/api/session.context", big(maxShimRequest), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(c.body)
			if c.chunked {
				body = io.MultiReader(body) // no length known: sent chunked
			}
			req, _ := http.NewRequest("POST", "http://"+addr+c.path, body)
			req.Header.Set("Authorization", "Bearer "+testToken)
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var reply struct{ Error runtime.HostError }
			if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(data, &reply) != nil || reply.Error.Name != "BadRequestError" {
				t.Fatalf("a %d-byte body: HTTP %d %s, want 413 with a BadRequestError", len(c.body), resp.StatusCode, data)
			}
		})
	}
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	if b.seq != 0 {
		t.Fatalf("%d events published, want none", b.seq)
	}
}

// Only thatch's tools are forwarded; another name is refused with a message naming them.
func TestShimRefusesUnknownTools(t *testing.T) {
	_, addr, _ := startShim(t, ShimLimits{})
	for _, name := range []string{"bash", "memory_remember.x", "thatch_extraction_done2", strings.Repeat("x", 500)} {
		conn, r := dial(t, addr)
		resp, body, err := exchange(t, conn, r, rawPost("/tool/"+name, testToken, `{}`), 5*time.Second)
		var reply struct{ Error runtime.HostError }
		if err != nil || resp.StatusCode != http.StatusNotFound || json.Unmarshal([]byte(body), &reply) != nil || reply.Error.Name != "NotFoundError" ||
			!strings.Contains(reply.Error.Message, "the shim forwards only thatch_get_extraction_payload, thatch_extraction_done, memory_remember") ||
			len(reply.Error.Message) > 400 {
			t.Fatalf("tool %.20q: %v %s (%v), want 404 naming thatch's tools", name, resp, body, err)
		}
	}
}

// A refused request closes its connection: a client without the token holds nothing. A
// token file the bridge must not trust (too short, readable by others) refuses every
// request, even one bearing its token.
func TestShimClosesAfterUnauthorized(t *testing.T) {
	_, addr, tokenFile := startShim(t, ShimLimits{})
	refused := func(token string) {
		t.Helper()
		conn, r := dial(t, addr)
		resp, _, err := exchange(t, conn, r, rawPost("/tool/memory_search", token, `{}`), 5*time.Second)
		if err != nil || resp.StatusCode != http.StatusUnauthorized || !resp.Close { // Close: the answer said Connection: close
			t.Fatalf("token %q: %v (%v), want 401 with Connection: close", token, resp, err)
		}
		if !closedByServer(t, conn, r, 2*time.Second) {
			t.Fatalf("token %q: the connection is still open after the 401", token)
		}
	}
	refused("")
	refused("wrong")
	refused(testToken[:len(testToken)-1])

	short := "abc123"
	must(t, os.WriteFile(tokenFile, []byte(short), 0o600))
	refused(short)
	must(t, os.WriteFile(tokenFile, []byte(testToken), 0o600))
	must(t, os.Chmod(tokenFile, 0o644))
	refused(testToken)
	must(t, os.Chmod(tokenFile, 0o600))
	conn, r := dial(t, addr)
	if resp, _, err := exchange(t, conn, r, rawPost("/tool/bash", testToken, `{}`), 5*time.Second); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the right token in a sound file: %v %v, want through to the 404", resp, err)
	}
}

// A tool call thatch answers within ShimLimits.Call is answered, however long past the
// read timeout: that timeout bounds reading the request, not the wait for thatch.
func TestShimToolCallOutlastsReadTimeout(t *testing.T) {
	b, addr, _ := startShim(t, ShimLimits{Read: 200 * time.Millisecond})
	release := make(chan struct{})
	sub, err := b.NC.Subscribe("thatch.tool.memory_search", func(m *nats.Msg) {
		<-release
		_ = m.Respond([]byte(`{"result":{"output":"late"}}`))
	})
	must(t, err)
	defer sub.Unsubscribe()
	must(t, b.NC.Flush())
	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+addr+"/tool/memory_search", strings.NewReader(`{"sessionID":"ses_a","args":{"query":"x"}}`))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(data)
	}()
	select {
	case got := <-done:
		t.Fatalf("answered before thatch did: %s", got)
	case <-time.After(time.Second): // five read timeouts
	}
	close(release)
	if got := <-done; got != `{"result":{"output":"late"}}` {
		t.Fatalf("the tool call answered %s, want thatch's late answer", got)
	}
}
