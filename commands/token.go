package commands

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/thatch-dev/thatch/internal/keyfile"
)

// MinTokenLen is the shortest shim token thatch accepts. The shim's endpoint listens on
// loopback, where every local account can knock: a token must not be guessable, and the
// one thatch writes is 48 hex characters (192 random bits).
const MinTokenLen = 32

// TokenAction is what EnsureToken did to the token file.
type TokenAction = keyfile.Action

const (
	// TokenKept: the token was sound and is left as it was.
	TokenKept = keyfile.Kept
	// TokenCreated: there was no token; a new one was written.
	TokenCreated = keyfile.Created
	// TokenMadePrivate: a sound token in a file of another private mode (0400, 0700) was
	// set to mode 0600, keeping the token.
	TokenMadePrivate = keyfile.MadePrivate
	// TokenReplaced: the old token was unsafe (too short, readable by other accounts, not
	// a regular file, or another user's file) and a new random one took its place.
	TokenReplaced = keyfile.Replaced
)

// ReadToken returns the shim token held in path, refusing one the bridge must not accept:
// the file must be a regular file (not a link) of the current user, readable by nobody
// else, holding at least MinTokenLen characters. The bridge applies it at every request,
// the installer (EnsureToken) before it keeps a token.
func ReadToken(path string) (string, error) {
	tok, problem, err := keyfile.Read(path, checkToken)
	if err != nil {
		return "", err
	}
	if problem.Kind != keyfile.Sound {
		return "", fmt.Errorf("the shim token in %s is unsafe (%s): run thatch install to replace it", path, problem)
	}
	return tok, nil
}

// checkToken says why tok cannot be a shim token, "" when it can.
func checkToken(tok string) string {
	if n := len(tok); n < MinTokenLen {
		return fmt.Sprintf("%d characters, fewer than %d", n, MinTokenLen)
	}
	return ""
}

// tokenRules are keyfile's rules for the shim token: an unsafe one is replaced.
var tokenRules = keyfile.Rules{Name: "the shim token", Check: checkToken, New: newToken}

// EnsureToken makes path hold a sound shim token (ReadToken's rule), creating its folder
// (0700) when needed, and returns what it did and, unless it kept or created the token,
// why. A token that other accounts could read is replaced, not only made private: it may
// have been copied already. Replacing costs nothing: the plugin and the bridge read the
// file at every request.
func EnsureToken(path string) (TokenAction, string, error) {
	r, err := keyfile.Ensure(path, tokenRules)
	if err != nil {
		return 0, "", err
	}
	switch r.Action {
	case TokenReplaced:
		return r.Action, r.Problem.String(), nil
	case TokenMadePrivate:
		return r.Action, fmt.Sprintf("mode %04o", r.Mode), nil
	}
	return r.Action, "", nil
}

// newToken makes a new random shim token.
func newToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
