package natsbus

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/thatch-dev/thatch/internal/keyfile"
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
	r, err := keyfile.Ensure(path, keyfile.Rules{
		Name: "the broker's store key", Check: checkToken, New: NewToken, Keep: true,
		BeforeCreate: func() error {
			if enc := encryptedStream(storeDir); enc != "" {
				return fmt.Errorf("the broker's store is encrypted (%s) but its key %s is missing: restore the key file, or move %s aside to start with an empty store (events thatch has not applied yet are lost)", enc, path, storeDir)
			}
			return nil
		},
	})
	if unsafe, ok := errors.AsType[*keyfile.UnsafeError](err); ok {
		switch p := unsafe.Problem; p.Kind {
		case keyfile.Link:
			return "", "", fmt.Errorf("the broker's store key %s is a symbolic link: replace it with the key file itself", path)
		case keyfile.NotRegular:
			return "", "", fmt.Errorf("the broker's store key %s is not a regular file: put the key file back", path)
		case keyfile.OtherOwner:
			return "", "", fmt.Errorf("the broker's store key %s is owned by uid %d, not by this user: check who wrote it", path, p.UID)
		default:
			return "", "", fmt.Errorf("the broker's store key %s is not a key (%s): restore it, or move it and %s aside to start with an empty store", path, p, storeDir)
		}
	}
	if r.Action == keyfile.MadePrivate {
		fixed = fmt.Sprintf("the broker's store key %s had mode %04o: made it 0600 (another account may have read it)", path, r.Mode)
	}
	return r.Secret, fixed, err
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
