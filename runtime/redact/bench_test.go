package redact

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// typicalOutput is about 8 KB of what tools print in a coding session: go test -v, ls -la,
// git log, Go source with the words token, key and password, a JSON response, an env dump.
// It holds no secret.
var typicalOutput = func() string {
	var b strings.Builder
	b.WriteString("$ go test -v ./journal/...\n")
	for i := range 12 {
		fmt.Fprintf(&b, "=== RUN   TestStore/claim_%d\n--- PASS: TestStore/claim_%d (0.0%ds)\n", i, i, i%10)
	}
	b.WriteString("PASS\nok  \tgithub.com/thatch-dev/thatch/journal\t0.412s\n\n$ ls -la\n")
	for i, n := range []string{"Makefile", "README.md", "go.mod", "go.sum", "cmd", "journal", "runtime", "adapters", "docs"} {
		fmt.Fprintf(&b, "-rw-r--r--  1 bob staff  %5d May %2d 10:%02d %s\n", 1200+i*317, 1+i, i*7, n)
	}
	b.WriteString("\n$ git log --oneline -8\n")
	for i := range 8 {
		fmt.Fprintf(&b, "%07x%033x fix: keep the key order when the token is refreshed (#%d)\n", 0x3f78685+i, i*991, 200+i)
	}
	b.WriteString(`
$ cat runtime/lexer.go
package runtime

// next returns the next token; a key is a token followed by a colon.
func (l *lexer) next() (token Token, err error) {
	token := l.scan()
	for token.Kind == Space {
		token = l.scan()
	}
	if token.Kind == Ident && l.peek() == ':' {
		key := token.Text
		l.keys[key]++
		return Token{Kind: Key, Text: key}, nil
	}
	return token, nil
}

type Config struct {
	Password string ` + "`json:\"password\"`" + `
	APIKey   string ` + "`json:\"api_key\"`" + `
	Token    string ` + "`envconfig:\"TOKEN\"`" + `
}

func load() Config {
	return Config{Password: os.Getenv("DB_PASSWORD"), APIKey: os.Getenv("API_KEY")}
}
`)
	b.WriteString(`
$ curl -s https://api.example.com/v1/items?page=2
{"items":[{"id":"123e4567-e89b-12d3-a456-426614174000","name":"widget","sha":"3f786850e387550fdab836ed7e6dc881de23001b","tags":["a","b"],"price":12.5},{"id":"223e4567-e89b-12d3-a456-426614174001","name":"gadget","sha":"4f786850e387550fdab836ed7e6dc881de23001c","tags":[],"price":7}],"next":"https://api.example.com/v1/items?page=3"}
`)
	b.WriteString("\n$ env | sort\nHOME=/home/bob\nLANG=en_US.UTF-8\nOLDPWD=/home/bob\nPATH=/usr/local/go/bin:/usr/bin:/bin\nPWD=/home/bob/src/thatch\nSHELL=/bin/zsh\nTERM=xterm-256color\n")
	for b.Len() < 8<<10 {
		b.WriteString("2024-05-01T10:00:00Z INFO http request method=GET path=/v1/items status=200 duration=3.2ms user=bob\n")
	}
	return b.String()
}()

// secretsOutput is typicalOutput with a secret of each kind in it.
var secretsOutput = typicalOutput + "\nGITHUB_TOKEN=" + ghToken + "\nAWS_ACCESS_KEY_ID=" + awsKey +
	"\nDATABASE_URL=postgres://bob:hunter2@db/app\npassword: hunter2\nAuthorization: Bearer " + jwt + "\n" + pemKey + "\n"

// denseAnchors is the worst case for the finders: every line starts something they
// look at, and none of it is a secret.
var denseAnchors = strings.Repeat("key: token password= eyJabc.def ://x@ Bearer x -----BEGIN x <private sk-x AKIA x\n", 1<<20/90)

func BenchmarkText(b *testing.B) {
	for _, c := range []struct {
		name string
		in   string
	}{
		{"typical-8KB", typicalOutput},
		{"secrets-8KB", secretsOutput},
		{"typical-1MB", strings.Repeat(typicalOutput, 128)},
		{"dense-anchors-1MB", denseAnchors},
		{"one-line-1MB", strings.ReplaceAll(denseAnchors, "\n", " ")},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.in)))
			b.ReportAllocs()
			for b.Loop() {
				Text(c.in)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6/(float64(len(c.in))/1024), "ms/KB")
		})
	}
}

func BenchmarkJSON(b *testing.B) {
	doc, err := json.Marshal(map[string]any{
		"tool": "bash", "args": map[string]string{"command": "go test ./..."},
		"output": typicalOutput, "metadata": map[string]any{"exit": 0, "password": "x"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		JSON(doc)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6/(float64(len(doc))/1024), "ms/KB")
}

// The typical output has no secret: nothing in it may be redacted, or the benchmark
// measures the wrong thing.
func TestBenchmarkInputs(t *testing.T) {
	if got, c := Text(typicalOutput); got != typicalOutput {
		t.Errorf("typical output changed: %v", c)
	}
	if _, c := Text(secretsOutput); c.Total() != 6 {
		t.Errorf("secrets output: %v, want 6 redactions", c)
	}
	if len(typicalOutput) < 8<<10 || len(typicalOutput) > 9<<10 {
		t.Errorf("typical output is %d bytes", len(typicalOutput))
	}
}
