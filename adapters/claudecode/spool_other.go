//go:build !unix

package claudecode

import (
	"errors"
	"io/fs"
	"os"
)

// lockSpool: without flock, drainers rely on the claim by rename alone (a file is sent by
// one drainer; two drainers may interleave files).
func lockSpool(dir string) (unlock func(), ok bool, err error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	return func() {}, true, nil
}
