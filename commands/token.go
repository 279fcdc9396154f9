package commands

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// MinTokenLen is the shortest shim token thatch accepts. The shim's endpoint listens on
// loopback, where every local account can knock: a token must not be guessable, and the
// one thatch writes is 48 hex characters (192 random bits).
const MinTokenLen = 32

// TokenAction is what EnsureToken did to the token file.
type TokenAction int

const (
	// TokenKept: the token was sound and is left as it was.
	TokenKept TokenAction = iota
	// TokenCreated: there was no token; a new one was written.
	TokenCreated
	// TokenMadePrivate: a sound token in a file of another private mode (0400, 0700) was
	// set to mode 0600, keeping the token.
	TokenMadePrivate
	// TokenReplaced: the old token was unsafe (too short, readable by other accounts, not
	// a regular file, or another user's file) and a new random one took its place.
	TokenReplaced
)

// tokenProblem is what is wrong with a token file; the empty string when nothing is.
type tokenProblem string

// ReadToken returns the shim token held in path, refusing one the bridge must not accept:
// the file must be a regular file (not a link) of the current user, readable by nobody
// else, holding at least MinTokenLen characters. The bridge applies it at every request,
// the installer (EnsureToken) before it keeps a token.
func ReadToken(path string) (string, error) {
	tok, problem, err := inspectToken(path)
	if err != nil {
		return "", err
	}
	if problem != "" {
		return "", fmt.Errorf("the shim token in %s is unsafe (%s): run thatch install to replace it", path, problem)
	}
	return tok, nil
}

// inspectToken reads the shim token file at path and says what, if anything, is wrong
// with it. An error is one reading it (fs.ErrNotExist when there is none).
func inspectToken(path string) (string, tokenProblem, error) {
	tok, problem, err := InspectTokenFile(path, func(tok string) string {
		if n := len(tok); n < MinTokenLen {
			return fmt.Sprintf("%d characters, fewer than %d", n, MinTokenLen)
		}
		return ""
	})
	return tok, tokenProblem(problem), err
}

// InspectTokenFile reads the token file at path and says what, if anything, makes it
// unsafe: a link, not a regular file, another user's, readable by other accounts, or a
// token check refuses (check says why; "" when it is sound). These are the rules of both
// of thatch's tokens, the shim's and the broker's (natsbus.EnsureToken). An error is one
// reading it (fs.ErrNotExist when there is none).
func InspectTokenFile(path string, check func(tok string) string) (token, problem string, err error) {
	// O_NOFOLLOW: a link planted in the token's place is refused, not followed.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return "", "a symbolic link", nil
	}
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", "", err
	}
	if !fi.Mode().IsRegular() {
		return "", "not a regular file", nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return "", fmt.Sprintf("owned by uid %d, not by this user", st.Uid), nil
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Sprintf("mode %04o: readable by other accounts", perm), nil
	}
	data, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return "", "", err
	}
	tok := strings.TrimSpace(string(data))
	if problem := check(tok); problem != "" {
		return "", problem, nil
	}
	return tok, "", nil
}

// EnsureToken makes path hold a sound shim token (ReadToken's rule), creating its folder
// (0700) when needed, and returns what it did and, unless it kept or created the token,
// why. A token that other accounts could read is replaced, not only made private: it may
// have been copied already. Replacing costs nothing: the plugin and the bridge read the
// file at every request.
func EnsureToken(path string) (TokenAction, string, error) {
	_, problem, err := inspectToken(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return 0, "", fmt.Errorf("create the data folder: %w", err)
		}
		if err := writeToken(path); err != nil {
			return 0, "", err
		}
		return TokenCreated, "", nil
	case err != nil:
		return 0, "", fmt.Errorf("read the shim token: %w", err)
	case problem != "":
		if err := writeToken(path); err != nil {
			return 0, "", err
		}
		return TokenReplaced, string(problem), nil
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, "", fmt.Errorf("read the shim token: %w", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		if err := os.Chmod(path, 0o600); err != nil {
			return 0, "", fmt.Errorf("make the shim token private: %w", err)
		}
		return TokenMadePrivate, fmt.Sprintf("mode %04o", perm), nil
	}
	return TokenKept, "", nil
}

// writeToken puts a new random shim token at path (WriteTokenFile).
func writeToken(path string) error {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("make a shim token: %w", err)
	}
	if err := WriteTokenFile(path, hex.EncodeToString(b[:])); err != nil {
		return fmt.Errorf("write the shim token: %w", err)
	}
	return nil
}

// WriteTokenFile puts tok at path, mode 0600: written to a fresh file beside it and
// renamed over it, so that whatever was there (another user's file, a link) is replaced,
// not written through, and a reader sees the old token or the new one.
func WriteTokenFile(path, tok string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*") // mode 0600
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(tok + "\n")
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
