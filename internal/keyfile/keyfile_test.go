package keyfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func check(s string) string {
	if len(s) < 8 {
		return "too short"
	}
	return ""
}

var next = 0

func newSecret() (string, error) { next++; return strings.Repeat("n", 8+next), nil }

// Ensure by the rules of a replaceable secret and of one that must be kept: the same
// files, each rule's answer.
func TestEnsure(t *testing.T) {
	good := "goodsecret"
	for _, tc := range []struct {
		name       string
		setup      func(path string)
		replace    Action // what a replaceable secret's Ensure does
		keep       Action // what a kept secret's Ensure does; -1: an *UnsafeError
		kind       Kind   // the problem a Replaced file had or an UnsafeError names
		keptSecret bool   // the file holds a sound secret, kept when the action is Kept or MadePrivate
	}{
		{"missing", func(string) {}, Created, Created, Sound, false},
		{"sound", file(good, 0o600), Kept, Kept, Sound, true},
		{"read-only", file(good, 0o400), MadePrivate, Kept, Sound, true},
		{"exposed", file(good, 0o644), Replaced, MadePrivate, Exposed, true},
		{"invalid", file("short", 0o600), Replaced, -1, Invalid, false},
		{"exposed and invalid", file("short", 0o644), Replaced, -1, -1, false},
		{"link", func(path string) {
			target := filepath.Join(filepath.Dir(path), "target")
			file(good, 0o600)(target)
			must(t, os.Symlink(target, path))
		}, Replaced, -1, Link, false},
		{"folder", func(path string) { must(t, os.Mkdir(path, 0o700)) }, -2, -1, NotRegular, false},
	} {
		for _, keep := range []bool{false, true} {
			want := tc.replace
			if keep {
				want = tc.keep
			}
			if want == -2 { // renaming a file over a folder fails: nothing to check
				continue
			}
			t.Run(tc.name+map[bool]string{false: "/replace", true: "/keep"}[keep], func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "key")
				tc.setup(path)
				r, err := Ensure(path, Rules{Name: "the key", Check: check, New: newSecret, Keep: keep})
				if want == -1 {
					var unsafe *UnsafeError
					if !errors.As(err, &unsafe) || (tc.kind >= 0 && unsafe.Problem.Kind != tc.kind) {
						t.Fatalf("Ensure: %v, %v; want an UnsafeError of kind %d", r, err, tc.kind)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if r.Action != want {
					t.Fatalf("action %d, want %d", r.Action, want)
				}
				if want == Replaced && tc.kind >= 0 && r.Problem.Kind != tc.kind {
					t.Fatalf("replaced for %q, want kind %d", r.Problem, tc.kind)
				}
				if (r.Secret == good) != (tc.keptSecret && (want == Kept || want == MadePrivate)) {
					t.Fatalf("secret %q (the file's was %q)", r.Secret, good)
				}
				got, p, err := Read(path, check)
				if err != nil || p.Kind != Sound || got != r.Secret {
					t.Fatalf("read back %q, %v, %v; want %q, sound", got, p, err, r.Secret)
				}
				if fi, _ := os.Stat(path); (keep && tc.name == "read-only") != (fi.Mode().Perm() != 0o600) {
					t.Fatalf("mode %04o after Ensure", fi.Mode().Perm())
				}
			})
		}
	}
}

// BeforeCreate's error stops the creation of a missing file.
func TestEnsureBeforeCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	stop := errors.New("stop")
	if _, err := Ensure(path, Rules{Check: check, New: newSecret, BeforeCreate: func() error { return stop }}); !errors.Is(err, stop) {
		t.Fatalf("Ensure: %v, want %v", err, stop)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file was created: %v", err)
	}
}

func file(content string, mode os.FileMode) func(string) {
	return func(path string) {
		if err := os.WriteFile(path, []byte(content+"\n"), mode); err != nil {
			panic(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			panic(err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
