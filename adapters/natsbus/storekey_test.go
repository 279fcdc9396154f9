package natsbus_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/adapters/natsbus"
)

// TestEnsureStoreKey: the store key is made once, private, and then kept as it is; a
// key that cannot be the store's stops the start instead of being replaced, since the
// store cannot be read without it.
func TestEnsureStoreKey(t *testing.T) {
	dir := t.TempDir()
	path, store := filepath.Join(dir, natsbus.StoreKeyFile), filepath.Join(dir, "nats")
	key, fixed, err := natsbus.EnsureStoreKey(path, store)
	if err != nil || fixed != "" || !natsbus.ValidToken(key) {
		t.Fatalf("first start: %q %q %v", key, fixed, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if again, _, err := natsbus.EnsureStoreKey(path, store); err != nil || again != key {
		t.Fatalf("second start: %q, %v; want the same key", again, err)
	}
	// Readable by others: kept (the store needs it), made private, said.
	must(t, os.Chmod(path, 0o644))
	if again, fixed, err := natsbus.EnsureStoreKey(path, store); err != nil || again != key || !strings.Contains(fixed, "0644") {
		t.Fatalf("mode 0644: %q %q %v", again, fixed, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after the fix", fi.Mode().Perm())
	}
	// A link, or a key that is no key: refused, the file left alone.
	link := filepath.Join(dir, "link.key")
	must(t, os.Symlink(path, link))
	if _, _, err := natsbus.EnsureStoreKey(link, store); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a link: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	must(t, os.WriteFile(short, []byte("abc\n"), 0o600))
	if _, _, err := natsbus.EnsureStoreKey(short, store); err == nil || !strings.Contains(err.Error(), "not a key") {
		t.Errorf("a short key: %v", err)
	}
	// An encrypted store whose key is gone: refused, no new key written.
	must(t, os.MkdirAll(filepath.Join(store, "jetstream", "$G", "streams", "OPENCODE_EVENTS"), 0o700))
	must(t, os.WriteFile(filepath.Join(store, "jetstream", "$G", "streams", "OPENCODE_EVENTS", "meta.key"), []byte("k"), 0o600))
	must(t, os.Remove(path))
	if _, _, err := natsbus.EnsureStoreKey(path, store); err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("missing key of an encrypted store: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a new key was written for an encrypted store")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
