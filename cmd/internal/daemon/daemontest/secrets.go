package daemontest

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Fake secrets in real formats; none is, or was, a live credential.
var Secrets = []string{
	"ghp_R8x2Kq9LmZ4vT7wN1pB6yC3dF5gH0jS2aE4u",
	"AKIAIOSFODNN7EXAMPLE",
	"sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90",
	"xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
	"glpat-xR4mN8bQ2kL6vT9wZ3yC",
	"hunter2-correct-horse",
	"MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn",
	"eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ",
	"my-private-home-address",
}

// NoSecretIn reads every file under dir and fails for each test secret one holds; it
// returns the names of the files read.
func NoSecretIn(t *testing.T, dir string) map[string]bool {
	t.Helper()
	read := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		read[rel] = true
		for _, s := range Secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s holds the secret %q", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return read
}
