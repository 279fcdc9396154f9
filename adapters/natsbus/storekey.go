package natsbus

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/thatch-dev/thatch/commands"
)

// StoreKeyFile is the file of the data folder that holds the key of the embedded broker's
// store (JetStream's encryption at rest), beside TokenFile.
const StoreKeyFile = "broker.key"

// EnsureStoreKey returns the key that encrypts the embedded broker's store in storeDir,
// kept in the file at path: it is created on the first start (64 hex digits from
// crypto/rand, mode 0600), as the broker token is. Unlike the token it is never replaced:
// the store cannot be read without it. So a key file that is a link, not a regular file or
// another user's, or a key that is too short, stops the start with what to do; a key
// readable by other accounts is made 0600 and said in fixed. A store already encrypted
// whose key file is missing stops the start too: a new key would leave its events
// unreadable.
func EnsureStoreKey(path, storeDir string) (key, fixed string, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return "", "", fmt.Errorf("the broker's store key %s is a symbolic link: replace it with the key file itself", path)
	case errors.Is(err, fs.ErrNotExist):
		if enc := encryptedStream(storeDir); enc != "" {
			return "", "", fmt.Errorf("the broker's store is encrypted (%s) but its key %s is missing: restore the key file, or move %s aside to start with an empty store (events thatch has not applied yet are lost)", enc, path, storeDir)
		}
		key, err := NewToken()
		if err != nil {
			return "", "", err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", "", fmt.Errorf("create data folder: %w", err)
		}
		if err := commands.WriteTokenFile(path, key); err != nil {
			return "", "", fmt.Errorf("write the broker's store key: %w", err)
		}
		return key, "", nil
	case err != nil:
		return "", "", fmt.Errorf("read the broker's store key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", "", fmt.Errorf("read the broker's store key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("the broker's store key %s is not a regular file: put the key file back", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return "", "", fmt.Errorf("the broker's store key %s is owned by uid %d, not by this user: check who wrote it", path, st.Uid)
	}
	data, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return "", "", fmt.Errorf("read the broker's store key: %w", err)
	}
	key = strings.TrimSpace(string(data))
	if !ValidToken(key) {
		return "", "", fmt.Errorf("the broker's store key %s is not a key (%d characters, fewer than %d, or spaces): restore it, or move it and %s aside to start with an empty store", path, len(key), MinTokenLen, storeDir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return "", "", fmt.Errorf("make the broker's store key private: %w", err)
		}
		fixed = fmt.Sprintf("the broker's store key %s had mode %04o: made it 0600 (another account may have read it)", path, perm)
	}
	return key, fixed, nil
}

// encryptedStream returns the folder of a stream of the JetStream store under storeDir
// that is encrypted (it has a key file of its own, meta.key), or "".
func encryptedStream(storeDir string) string {
	found, _ := filepath.Glob(filepath.Join(storeDir, "jetstream", "*", "streams", "*", "meta.key"))
	if len(found) == 0 {
		return ""
	}
	return filepath.Dir(found[0])
}
