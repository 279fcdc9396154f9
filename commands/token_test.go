package commands

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// EnsureToken keeps a sound token, creates a missing one, makes a private one 0600, and
// replaces one that is short, readable by others, or a link; ReadToken accepts what it
// leaves and nothing it would have replaced.
func TestEnsureToken(t *testing.T) {
	long := strings.Repeat("k", MinTokenLen)
	for _, c := range []struct {
		name    string
		setup   func(t *testing.T, path string) // nil: no file
		want    TokenAction
		why     string // in the reason given
		sameTok bool   // the token is kept
	}{
		{name: "missing", want: TokenCreated},
		{name: "sound", setup: file(long+"\n", 0o600), want: TokenKept, sameTok: true},
		{name: "short", setup: file("abc123\n", 0o600), want: TokenReplaced, why: "6 characters, fewer than 32"},
		{name: "world-readable", setup: file(long, 0o644), want: TokenReplaced, why: "mode 0644: readable by other accounts"},
		{name: "group-readable", setup: file(long, 0o640), want: TokenReplaced, why: "mode 0640"},
		{name: "read-only", setup: file(long, 0o400), want: TokenMadePrivate, why: "mode 0400", sameTok: true},
		{name: "link", setup: func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			file(long, 0o600)(t, target)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, want: TokenReplaced, why: "a symbolic link"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "data", "shim.token")
			if c.setup != nil {
				if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
					t.Fatal(err)
				}
				c.setup(t, path)
			}
			action, why, err := EnsureToken(path)
			if err != nil || action != c.want || !strings.Contains(why, c.why) || (c.why == "") != (why == "") {
				t.Fatalf("EnsureToken: %v %q %v, want %v with a reason containing %q", action, why, err, c.want, c.why)
			}
			fi, err := os.Lstat(path)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
				t.Fatalf("the token file after EnsureToken: %v %v, want a regular file of mode 0600", fi.Mode(), err)
			}
			tok, err := ReadToken(path)
			if err != nil || len(tok) < MinTokenLen {
				t.Fatalf("ReadToken after EnsureToken: %q %v", tok, err)
			}
			if (tok == long) != c.sameTok {
				t.Fatalf("token %q; kept: %v, want kept: %v", tok, tok == long, c.sameTok)
			}
			if again, _, err := EnsureToken(path); again != TokenKept || err != nil {
				t.Fatalf("a second EnsureToken: %v %v, want the token kept", again, err)
			}
		})
	}
}

func TestReadTokenRefusesUnsafeFiles(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("k", MinTokenLen)
	for name, c := range map[string]struct {
		content string
		mode    os.FileMode
		want    string
	}{
		"short":          {"abc123", 0o600, "6 characters"},
		"world-readable": {long, 0o644, "mode 0644"},
		"empty":          {"\n", 0o600, "0 characters"},
	} {
		path := filepath.Join(dir, name)
		file(c.content, c.mode)(t, path)
		if tok, err := ReadToken(path); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "run thatch install") {
			t.Errorf("%s: %q %v, want an error naming %q and what to do", name, tok, err, c.want)
		}
	}
	if _, err := ReadToken(filepath.Join(dir, "none")); !os.IsNotExist(err) {
		t.Errorf("no file: %v, want not-exist", err)
	}
}

// file writes content at a path with mode.
func file(content string, mode os.FileMode) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
}
