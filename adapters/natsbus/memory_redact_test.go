package natsbus_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime/redact/redacttest"
)

// TestPropertyMemoryRedacted: a secret in a memory's content, tags or forget reason, after
// any character and inside JSON text, never reaches the memory store (its answer, its
// file, its write-ahead log) whenever the redactor promises it; the store redacts with
// the daemon's redactor (Memories.Redact).
func TestPropertyMemoryRedacted(t *testing.T) {
	dir := t.TempDir()
	mems := &natsbus.Memories{}
	store, err := memory.Open(filepath.Join(dir, "memories.db"), memory.Options{Redact: mems.Redact})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	n := 0
	rapid.Check(t, func(t *rapid.T) {
		s := redacttest.DrawSecret(t)
		b := redacttest.DrawBefore(t)
		after := redacttest.DrawAfter(t, s)
		if !redacttest.Promised(s, b) {
			t.Skip("not promised")
		}
		n++
		c := memory.Caller{Project: "p1", SessionID: "ses_1", CallID: fmt.Sprintf("call_%d", n)}
		var content string
		if rapid.Bool().Draw(t, "json") {
			quote := redacttest.DrawQuote(t)
			content = `the tool printed {"log":` + quote("created"+redacttest.Unquote(b.Raw)+s.Text+redacttest.Unquote(after)) + `}`
		} else {
			content = "remember: " + b.Raw + s.Text + after
		}
		tags := []string{"t" + fmt.Sprint(n), b.Raw + s.Text}
		got, err := store.Remember(ctx, c, memory.RememberArgs{Content: content, Tags: tags}, now)
		if err != nil {
			// A tag that holds a URL may be over the tag limit even redacted: the error
			// names the tag, redacted. Remember the content alone.
			if strings.Contains(err.Error(), s.Core) {
				t.Fatalf("the error quotes the %s secret: %v", s.Rule, err)
			}
			got, err = store.Remember(ctx, c, memory.RememberArgs{Content: content}, now)
			if err != nil {
				t.Fatalf("remember %q: %v", content, err)
			}
		}
		if strings.Contains(got.Memory.Content+strings.Join(got.Memory.Tags, " "), s.Core) {
			t.Fatalf("the %s secret survived in the memory\n in: %q %q\nout: %q %q", s.Rule, content, tags, got.Memory.Content, got.Memory.Tags)
		}
		fc := c
		fc.CallID += "-forget"
		if _, err := store.Forget(ctx, fc, got.Memory.ID, "superseded: "+b.Raw+s.Text+after, now); err != nil {
			t.Fatalf("forget: %v", err)
		}
		if f, ok := fileHolding(dir, s.Core); ok {
			t.Fatalf("the %s secret is in %s", s.Rule, f)
		}
	})
}

// fileHolding returns the first file under dir that holds needle.
func fileHolding(dir, needle string) (string, bool) {
	var found string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || found != "" {
			return nil
		}
		if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, []byte(needle)) {
			found = path
		}
		return nil
	})
	return found, found != ""
}
