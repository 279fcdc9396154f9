package keyfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Kind is what makes a key file unsafe to use as it is.
type Kind int

const (
	Sound      Kind = iota // nothing is wrong
	Link                   // a symbolic link: it may point anywhere
	NotRegular             // a folder, a pipe, a device
	OtherOwner             // another user's file
	Exposed                // readable or writable by other accounts
	Invalid                // its content fails the caller's check
)

// Problem says what is wrong with a key file.
type Problem struct {
	Kind   Kind
	UID    int         // OtherOwner: the file's owner
	Mode   fs.FileMode // Exposed: the file's permissions
	Reason string      // Invalid: what the check said
}

func (p Problem) String() string {
	switch p.Kind {
	case Link:
		return "a symbolic link"
	case NotRegular:
		return "not a regular file"
	case OtherOwner:
		return fmt.Sprintf("owned by uid %d, not by this user", p.UID)
	case Exposed:
		return fmt.Sprintf("mode %04o: readable by other accounts", p.Mode)
	case Invalid:
		return p.Reason
	}
	return ""
}

// read reads the key file at path and returns its content (spaces trimmed) and its
// permissions, or what is wrong with the file itself (a link, not a regular file,
// another user's) or with its content (check says why; "" when it is sound). Permissions
// are not judged here. An error is one reading it (fs.ErrNotExist when there is none).
func read(path string, check func(string) string) (secret string, perm fs.FileMode, p Problem, err error) {
	// O_NOFOLLOW: a link planted in the key's place is refused, not followed.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return "", 0, Problem{Kind: Link}, nil
	}
	if err != nil {
		return "", 0, Problem{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, Problem{}, err
	}
	if !fi.Mode().IsRegular() {
		return "", 0, Problem{Kind: NotRegular}, nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return "", 0, Problem{Kind: OtherOwner, UID: int(st.Uid)}, nil
	}
	perm = fi.Mode().Perm()
	data, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return "", 0, Problem{}, err
	}
	secret = strings.TrimSpace(string(data))
	if why := check(secret); why != "" {
		return "", perm, Problem{Kind: Invalid, Reason: why}, nil
	}
	return secret, perm, Problem{}, nil
}

// strict adds the rule of a secret that may not be exposed: a file other accounts can
// read is unsafe, before what its content is.
func strict(perm fs.FileMode, p Problem) Problem {
	if (p.Kind == Sound || p.Kind == Invalid) && perm&0o077 != 0 {
		return Problem{Kind: Exposed, Mode: perm}
	}
	return p
}

// Read returns the secret in the file at path, or what makes it unsafe: a link, not a
// regular file, another user's, readable by other accounts, or content that check
// refuses (check returns why; "" when it is sound). An error is one reading it
// (fs.ErrNotExist when there is none).
func Read(path string, check func(string) string) (string, Problem, error) {
	secret, perm, p, err := read(path, check)
	return secret, strict(perm, p), err
}

// Write puts secret at path, mode 0600, creating its folder (0700) when needed: written
// to a fresh file beside it and renamed over it, so that whatever was there (another
// user's file, a link) is replaced, not written through, and a reader sees the old
// secret or the new one.
func Write(path, secret string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create the data folder: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*") // mode 0600
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(secret + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// Rules are what Ensure does with one kind of secret file.
type Rules struct {
	// Name names the secret in errors ("the shim token").
	Name string
	// Check returns why a secret is unusable, "" when it is sound.
	Check func(secret string) string
	// New makes a new secret.
	New func() (string, error)
	// Keep is for a secret that cannot be replaced (what it encrypts would be lost): an
	// unsafe file is an *UnsafeError, and a file other accounts can read is made 0600 and
	// kept. Without Keep an unsafe file gets a new secret, a file other accounts can read
	// included (it may have been copied already).
	Keep bool
	// BeforeCreate, when set, is asked before a missing file is created; its error stops
	// Ensure.
	BeforeCreate func() error
}

// Action is what Ensure did to the file.
type Action int

const (
	// Kept: the secret was sound and is left as it was.
	Kept Action = iota
	// Created: there was no file; a new secret was written.
	Created
	// MadePrivate: a sound secret in a file of another mode was set to mode 0600, keeping
	// the secret.
	MadePrivate
	// Replaced: the old file was unsafe and a new secret took its place.
	Replaced
)

// Result is what Ensure did and the secret the file now holds.
type Result struct {
	Secret string
	Action Action
	// Problem is why the file was Replaced.
	Problem Problem
	// Mode is the mode a MadePrivate file had.
	Mode fs.FileMode
}

// UnsafeError is a file that Rules.Keep forbids replacing and that cannot be used.
type UnsafeError struct {
	Path    string
	Problem Problem
}

func (e *UnsafeError) Error() string { return fmt.Sprintf("%s is unsafe: %s", e.Path, e.Problem) }

// Ensure makes path hold a sound secret by r: it reads it, creates it when it is missing,
// replaces or refuses it when it is unsafe, and makes it 0600 when it is not, and says
// which of these it did.
func Ensure(path string, r Rules) (Result, error) {
	secret, perm, p, err := read(path, r.Check)
	if !r.Keep {
		p = strict(perm, p)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if r.BeforeCreate != nil {
			if err := r.BeforeCreate(); err != nil {
				return Result{}, err
			}
		}
		secret, err := r.write(path)
		return Result{Secret: secret, Action: Created}, err
	case err != nil:
		return Result{}, fmt.Errorf("read %s: %w", r.Name, err)
	case p.Kind != Sound && r.Keep:
		return Result{}, &UnsafeError{Path: path, Problem: p}
	case p.Kind != Sound:
		secret, err := r.write(path)
		return Result{Secret: secret, Action: Replaced, Problem: p}, err
	}
	// The mode to fix: any but 0600 for a secret that may be replaced; for one that must
	// be kept, only a mode that lets other accounts in (a 0400 key stays as it is).
	if perm != 0o600 && (!r.Keep || perm&0o077 != 0) {
		if err := os.Chmod(path, 0o600); err != nil {
			return Result{}, fmt.Errorf("make %s private: %w", r.Name, err)
		}
		return Result{Secret: secret, Action: MadePrivate, Mode: perm}, nil
	}
	return Result{Secret: secret, Action: Kept}, nil
}

// write puts a new secret at path.
func (r Rules) write(path string) (string, error) {
	secret, err := r.New()
	if err != nil {
		return "", fmt.Errorf("make %s: %w", r.Name, err)
	}
	if err := Write(path, secret); err != nil {
		return "", fmt.Errorf("write %s: %w", r.Name, err)
	}
	return secret, nil
}
