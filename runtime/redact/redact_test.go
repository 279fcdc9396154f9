package redact

import (
	"maps"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// Fake secrets in the real formats. None of them is, or was, a live credential.
const (
	awsKey       = "AKIAIOSFODNN7EXAMPLE"
	awsTempKey   = "ASIAY34FZKBOKMUTVV7A"
	awsSecret    = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	ghToken      = "ghp_R8x2Kq9LmZ4vT7wN1pB6yC3dF5gH0jS2aE4u"
	ghOAuth      = "gho_1A2b3C4d5E6f7G8h9I0j1K2l3M4n5O6p7Q8r"
	ghPAT        = "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
	glToken      = "glpat-xR4mN8bQ2kL6vT9wZ3yC"
	openaiKey    = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90"
	openaiOld    = "sk-T3BlbkFJa1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuV"
	anthropicKey = "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe_dC-bA9zY8xW7vU6tS5rQ4pO3nM2lK1jI0hG-AA"
	slackToken   = "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	slackHook    = "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
	googleKey    = "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
	stripeKey    = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	stripeTest   = "sk_test_51H8aBcDeFgHiJkLmNoPqRsTu"
	jwt          = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	opaque       = "f3a9c2e7b1d84c6a9e0f2b7d5c8a1e4f" // a 32-hex API token
	pemBody      = "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naGdpNDJuZQBYjHuJZJrMSzqhw5u4m1dDmZ0g8BTX2NNFrCNMSH7bvvLRGHdqW0L2\n"
	pemKey       = "-----BEGIN RSA PRIVATE KEY-----\n" + pemBody + "-----END RSA PRIVATE KEY-----"
)

func red(rule string) string { return "[REDACTED:" + rule + "]" }

func TestTextRedacts(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   string
		counts Counts
		gone   []string // must not appear in the output, not even in part
	}{
		{
			name:   "aws access key in credentials output",
			in:     "aws_access_key_id = " + awsKey + "\naws_secret_access_key = " + awsSecret + "\n",
			want:   "aws_access_key_id = " + red("aws-access-key") + "\naws_secret_access_key = " + red("aws-secret") + "\n",
			counts: Counts{"aws-access-key": 1, "aws-secret": 1},
			gone:   []string{"IOSFODNN7", "wJalrXUtnFEMI", "EXAMPLEKEY"},
		},
		{
			name:   "aws temporary key in env",
			in:     "AWS_ACCESS_KEY_ID=" + awsTempKey + " AWS_SECRET_ACCESS_KEY=" + awsSecret,
			want:   "AWS_ACCESS_KEY_ID=" + red("aws-access-key") + " AWS_SECRET_ACCESS_KEY=" + red("aws-secret"),
			counts: Counts{"aws-access-key": 1, "aws-secret": 1},
			gone:   []string{"Y34FZKB", "CYEXAMPLE"},
		},
		{
			name:   "github token in git remote -v",
			in:     "origin\thttps://x-access-token:" + ghToken + "@github.com/acme/app.git (fetch)\norigin\thttps://x-access-token:" + ghToken + "@github.com/acme/app.git (push)\n",
			want:   "origin\thttps://x-access-token:" + red("github-token") + "@github.com/acme/app.git (fetch)\norigin\thttps://x-access-token:" + red("github-token") + "@github.com/acme/app.git (push)\n",
			counts: Counts{"github-token": 2},
			gone:   []string{"R8x2Kq9", "aE4u"},
		},
		{
			name:   "export GITHUB_TOKEN",
			in:     "$ export GITHUB_TOKEN=" + ghToken + "\n$ gh auth status",
			want:   "$ export GITHUB_TOKEN=" + red("github-token") + "\n$ gh auth status",
			counts: Counts{"github-token": 1},
		},
		{
			name:   "github oauth and fine-grained tokens",
			in:     "token " + ghOAuth + " and " + ghPAT + ".",
			want:   "token " + red("github-token") + " and " + red("github-token") + ".",
			counts: Counts{"github-token": 2},
			gone:   []string{"1A2b3C", "aBcDeFgHiJkL", "_mNoPq"},
		},
		{
			name:   "gitlab token in a clone URL",
			in:     "git clone https://oauth2:" + glToken + "@gitlab.com/acme/app.git",
			want:   "git clone https://oauth2:" + red("gitlab-token") + "@gitlab.com/acme/app.git",
			counts: Counts{"gitlab-token": 1},
			gone:   []string{"xR4mN8b"},
		},
		{
			name:   "openai project key in python",
			in:     "client = OpenAI(api_key=\"" + openaiKey + "\")",
			want:   "client = OpenAI(api_key=\"" + red("openai-key") + "\")",
			counts: Counts{"openai-key": 1},
			gone:   []string{"Ab12Cd34", "proj-"},
		},
		{
			name:   "openai legacy key in prose",
			in:     "use " + openaiOld + " for now",
			want:   "use " + red("openai-key") + " for now",
			counts: Counts{"openai-key": 1},
		},
		{
			name:   "anthropic key in .env",
			in:     "ANTHROPIC_API_KEY=" + anthropicKey + "\nMODEL=claude\n",
			want:   "ANTHROPIC_API_KEY=" + red("anthropic-key") + "\nMODEL=claude\n",
			counts: Counts{"anthropic-key": 1},
			gone:   []string{"api03", "Zx9Yw8", "-AA"},
		},
		{
			name:   "slack bot token",
			in:     `curl -H "Authorization: Bearer ` + slackToken + `" https://slack.com/api/chat.postMessage`,
			want:   `curl -H "Authorization: Bearer ` + red("slack-token") + `" https://slack.com/api/chat.postMessage`,
			counts: Counts{"slack-token": 1},
			gone:   []string{"1234567890", "AbCdEf"},
		},
		{
			name:   "slack webhook",
			in:     "SLACK_WEBHOOK=https://hooks.slack.com/services/" + slackHook + "\n",
			want:   "SLACK_WEBHOOK=https://hooks.slack.com/services/" + red("slack-webhook") + "\n",
			counts: Counts{"slack-webhook": 1},
			gone:   []string{"T00000000", "XXXXXXXX"},
		},
		{
			name:   "google api key in a URL",
			in:     "GET https://maps.googleapis.com/maps/api/geocode/json?address=x&key=" + googleKey + " 200",
			want:   "GET https://maps.googleapis.com/maps/api/geocode/json?address=x&key=" + red("google-api-key") + " 200",
			counts: Counts{"google-api-key": 1},
		},
		{
			name:   "stripe keys",
			in:     "stripe.api_key = '" + stripeKey + "'\nSTRIPE_TEST=" + stripeTest,
			want:   "stripe.api_key = '" + red("stripe-key") + "'\nSTRIPE_TEST=" + red("stripe-key"),
			counts: Counts{"stripe-key": 2},
			gone:   []string{"4eC39H", "51H8aB"},
		},
		{
			name:   "jwt in a log line",
			in:     `2024-05-01T10:00:00Z INFO request authenticated jwt=` + jwt + ` user=42`,
			want:   `2024-05-01T10:00:00Z INFO request authenticated jwt=` + red("jwt") + ` user=42`,
			counts: Counts{"jwt": 1},
			gone:   []string{"eyJzdWIi", "SflKxw"},
		},
		{
			name:   "pem block inside other text",
			in:     "$ cat id_rsa\n" + pemKey + "\n$ ls\nREADME.md\n",
			want:   "$ cat id_rsa\n" + red("pem-private-key") + "\n$ ls\nREADME.md\n",
			counts: Counts{"pem-private-key": 1},
			gone:   []string{"MIIEow", "aGdpNDJ", "PRIVATE KEY"},
		},
		{
			name:   "pem openssh and pkcs8 blocks",
			in:     "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\nand\n-----BEGIN PRIVATE KEY-----\n" + pemBody + "-----END PRIVATE KEY-----\n",
			want:   red("pem-private-key") + "\nand\n" + red("pem-private-key") + "\n",
			counts: Counts{"pem-private-key": 2},
		},
		{
			name:   "pem unterminated removes to the end",
			in:     "$ head -3 key.pem\n-----BEGIN EC PRIVATE KEY-----\n" + pemBody + "$ echo done\n",
			want:   "$ head -3 key.pem\n" + red("pem-private-key"),
			counts: Counts{"pem-private-key": 1},
			gone:   []string{"MIIEow", "echo done"},
		},
		{
			name:   "pem in a JSON service account, escaped",
			in:     `{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n", "client_email": "a@b.iam.gserviceaccount.com"}`,
			want:   `{"type": "service_account", "private_key": "` + red("pem-private-key") + `\n", "client_email": "a@b.iam.gserviceaccount.com"}`,
			counts: Counts{"pem-private-key": 1},
			gone:   []string{"MIIEvQ"},
		},
		{
			name:   "base64 private key in a kubeconfig",
			in:     "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=\n    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVB\n",
			want:   "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=\n    client-key-data: " + red("pem-private-key") + "\n",
			counts: Counts{"pem-private-key": 1},
		},
		{
			name:   "url password",
			in:     "DATABASE_URL=postgres://bob:hunter2@db.internal:5432/app?sslmode=disable",
			want:   "DATABASE_URL=postgres://bob:" + red("url-password") + "@db.internal:5432/app?sslmode=disable",
			counts: Counts{"url-password": 1},
			gone:   []string{"hunter2"},
		},
		{
			name:   "url password with an at sign and an empty user",
			in:     "redis://:p@ss:w0rd@cache:6379/0 and amqp://guest:guest@localhost",
			want:   "redis://:" + red("url-password") + "@cache:6379/0 and amqp://guest:" + red("url-password") + "@localhost",
			counts: Counts{"url-password": 2},
			gone:   []string{"p@ss", "w0rd"},
		},
		{
			name:   "curl with a bearer header",
			in:     `curl -s -H "Authorization: Bearer ` + opaque + `" https://api.example.com/v1/me`,
			want:   `curl -s -H "Authorization: Bearer ` + red("bearer") + `" https://api.example.com/v1/me`,
			counts: Counts{"bearer": 1},
			gone:   []string{"f3a9c2e7"},
		},
		{
			name:   "bearer in a log line",
			in:     "sending request with Bearer " + opaque + " to upstream",
			want:   "sending request with Bearer " + red("bearer") + " to upstream",
			counts: Counts{"bearer": 1},
		},
		{
			name:   "bearer jwt is labelled jwt",
			in:     "Authorization: Bearer " + jwt,
			want:   "Authorization: Bearer " + red("jwt"),
			counts: Counts{"jwt": 1},
		},
		{
			name:   "short bearer token in an Authorization header",
			in:     "authorization: bearer abc123",
			want:   "authorization: bearer " + red("bearer"),
			counts: Counts{"bearer": 1},
		},
		{
			name:   "basic and token authorization headers",
			in:     "Authorization: Basic dXNlcjpodW50ZXIy\nAuthorization: token 0123abcd\n",
			want:   "Authorization: Basic " + red("authorization") + "\nAuthorization: token " + red("authorization") + "\n",
			counts: Counts{"authorization": 2},
			gone:   []string{"dXNlcjpodW50ZXIy", "0123abcd"},
		},
		{
			name:   "curl -u",
			in:     "curl -u admin:s3cr3t! https://jenkins.local/api/json",
			want:   "curl -u admin:" + red("basic-auth") + " https://jenkins.local/api/json",
			counts: Counts{"basic-auth": 1},
			gone:   []string{"s3cr3t"},
		},
		{
			name: ".env file",
			in: "# app settings\nDB_HOST=localhost\nDB_USER=app\nDB_PASSWORD=Tr0ub4dor&3\nSECRET_KEY_BASE=\"9f8e7d6c5b4a\"\n" +
				"SESSION_TOKEN='" + opaque + "'\nAPI_KEY=" + opaque + "\nDEBUG=true\n",
			want: "# app settings\nDB_HOST=localhost\nDB_USER=app\nDB_PASSWORD=" + red("assignment") + "&3\nSECRET_KEY_BASE=\"" + red("assignment") + "\"\n" +
				"SESSION_TOKEN='" + red("assignment") + "'\nAPI_KEY=" + red("assignment") + "\nDEBUG=true\n",
			counts: Counts{"assignment": 4},
			gone:   []string{"Tr0ub4dor", "9f8e7d6c5b4a", "f3a9c2e7"},
		},
		{
			name:   "kubeconfig user",
			in:     "users:\n- name: admin\n  user:\n    username: admin\n    password: Sup3rS3cret\n    token: " + opaque + "\n",
			want:   "users:\n- name: admin\n  user:\n    username: admin\n    password: " + red("assignment") + "\n    token: " + red("assignment") + "\n",
			counts: Counts{"assignment": 2},
			gone:   []string{"Sup3rS3cret", "f3a9c2e7"},
		},
		{
			name:   "json password as text",
			in:     `{"username": "bob", "password": "correct horse battery staple", "remember": true}`,
			want:   `{"username": "bob", "password": "` + red("assignment") + `", "remember": true}`,
			counts: Counts{"assignment": 1},
			gone:   []string{"horse"},
		},
		{
			name:   "json escaped inside a string",
			in:     `"output": "{\"user\":\"bob\",\"password\":\"hunter2\"}"`,
			want:   `"output": "{\"user\":\"bob\",\"password\":\"` + red("assignment") + `\"}"`,
			counts: Counts{"assignment": 1},
			gone:   []string{"hunter2"},
		},
		{
			name:   "yaml secret and a comment",
			in:     "db:\n  password: hunter2 # prod\n  client_secret: \"abc def\"\n",
			want:   "db:\n  password: " + red("assignment") + " # prod\n  client_secret: \"" + red("assignment") + "\"\n",
			counts: Counts{"assignment": 2},
		},
		{
			name:   "yaml block scalar",
			in:     "stringData:\n  private_key: |\n    line one of the key\n    line two of the key\n  user: bob\n",
			want:   "stringData:\n  private_key: |\n    " + red("assignment") + "\n  user: bob\n",
			counts: Counts{"assignment": 1},
			gone:   []string{"line one", "line two"},
		},
		{
			name:   "go and python literals",
			in:     "password := \"hunter2\"\nself.api_token = '" + opaque + "'\n$password = 'hunter2';",
			want:   "password := \"" + red("assignment") + "\"\nself.api_token = '" + red("assignment") + "'\n$password = '" + red("assignment") + "';",
			counts: Counts{"assignment": 3},
		},
		{
			name:   "flags",
			in:     "mysql --user=root --password=hunter2 app\ndocker login --username bob --password hunter3 ghcr.io\nvault login -token=" + opaque,
			want:   "mysql --user=root --password=" + red("assignment") + " app\ndocker login --username bob --password " + red("assignment") + " ghcr.io\nvault login -token=" + red("assignment"),
			counts: Counts{"assignment": 3},
		},
		{
			name:   "http headers and query strings",
			in:     "X-Api-Key: " + opaque + "\nGET /v1/items?access_token=" + opaque + "&page=2\nSet-Cookie: auth=" + opaque + "; Path=/",
			want:   "X-Api-Key: " + red("assignment") + "\nGET /v1/items?access_token=" + red("assignment") + "&page=2\nSet-Cookie: auth=" + red("assignment") + "; Path=/",
			counts: Counts{"assignment": 3},
		},
		{
			name:   "npmrc",
			in:     "//registry.npmjs.org/:_authToken=npm_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5\n",
			want:   "//registry.npmjs.org/:_authToken=" + red("npm-token") + "\n",
			counts: Counts{"npm-token": 1},
		},
		{
			name:   "netrc",
			in:     "machine api.example.com\n  login bob\n  password hunter2\nmachine b.example.com login amy password s3cret",
			want:   "machine api.example.com\n  login bob\n  password " + red("assignment") + "\nmachine b.example.com login amy password " + red("assignment"),
			counts: Counts{"assignment": 2},
		},
		{
			name:   "secret merged with a token rule is one redaction",
			in:     "GITHUB_TOKEN: " + ghToken,
			want:   "GITHUB_TOKEN: " + red("github-token"),
			counts: Counts{"github-token": 1},
		},
		{
			name:   "kubernetes secret and docker inspect",
			in:     "data:\n  password: cGFzc3dvcmQxMjM=\n  username: YWRtaW4=\n\"Env\": [\"POSTGRES_PASSWORD=example\", \"PATH=/usr/bin\"]",
			want:   "data:\n  password: " + red("assignment") + "\n  username: YWRtaW4=\n\"Env\": [\"POSTGRES_PASSWORD=" + red("assignment") + "\", \"PATH=/usr/bin\"]",
			counts: Counts{"assignment": 2},
		},
		{
			name:   "aws secret without the aws prefix",
			in:     "  secret_access_key: \"" + awsSecret + "\"",
			want:   "  secret_access_key: \"" + red("aws-secret") + "\"",
			counts: Counts{"aws-secret": 1},
		},
		{
			name:   "bare token in an Authorization header",
			in:     "Proxy-Authorization: " + opaque + "\nHTTP_AUTHORIZATION=Bearer abc",
			want:   "Proxy-Authorization: " + red("authorization") + "\nHTTP_AUTHORIZATION=Bearer " + red("bearer"),
			counts: Counts{"authorization": 1, "bearer": 1},
		},
		{
			name:   "assignments in a JSON document shown as text",
			in:     `{"command":"export DB_PASSWORD=hunter2\nls","out":"token: ` + opaque + `\n"}`,
			want:   `{"command":"export DB_PASSWORD=` + red("assignment") + `\nls","out":"token: ` + red("assignment") + `\n"}`,
			counts: Counts{"assignment": 2},
		},
		{
			name:   "short bare token in an Authorization header",
			in:     "Authorization: abc12345",
			want:   "Authorization: " + red("authorization"),
			counts: Counts{"authorization": 1},
		},
		{
			name:   "shortest tokens that match",
			in:     "AKIA" + strings.Repeat("Q", 16) + " ghp_" + strings.Repeat("a", 36) + " sk-" + strings.Repeat("A", 17) + " glpat-" + strings.Repeat("b", 20),
			want:   red("aws-access-key") + " " + red("github-token") + " " + red("openai-key") + " " + red("gitlab-token"),
			counts: Counts{"aws-access-key": 1, "github-token": 1, "openai-key": 1, "gitlab-token": 1},
		},
		{
			name:   "a marker is never redacted again",
			in:     "password=" + red("assignment") + " token: " + red("github-token"),
			want:   "password=" + red("assignment") + " token: " + red("github-token"),
			counts: nil,
		},
		{
			name:   "unicode around a secret",
			in:     "clé → password=pässwörd ✓",
			want:   "clé → password=" + red("assignment") + " ✓",
			counts: Counts{"assignment": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, counts := Text(tt.in)
			if got != tt.want {
				t.Errorf("Text(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if !maps.Equal(counts, tt.counts) {
				t.Errorf("counts = %v, want %v", counts, tt.counts)
			}
			for _, g := range tt.gone {
				if strings.Contains(got, g) {
					t.Errorf("output still holds %q: %q", g, got)
				}
			}
			checkIdempotent(t, got)
		})
	}
}

// Everything here must come out unchanged, with no counts.
// TestTextRedactsAfterAnything: a distinctive prefix is a secret after any character; a
// JSON escape starts a word for every rule (issue 29: 117 of 198 placements leaked).
func TestTextRedactsAfterAnything(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"log":"created\n` + ghToken + `"}`, `{"log":"created\n` + red("github-token") + `"}`},
		{"build" + ghToken, "build" + red("github-token")},
		{"id_" + ghPAT, "id_" + red("github-token")},
		{"7" + glToken, "7" + red("gitlab-token")},
		{"x" + slackToken, "x" + red("slack-token")},
		{"key" + stripeKey, "key" + red("stripe-key")},
		{"env" + openaiKey, "env" + red("openai-key")},
		{"a" + anthropicKey, "a" + red("anthropic-key")},
		{"token" + jwt, "token" + red("jwt")},
		{`\t` + awsKey, `\t` + red("aws-access-key")},
		{`\u00e9` + openaiOld, `\u00e9` + red("openai-key")},
		{`"{\"a\":\"b\"}\r` + googleKey, `"{\"a\":\"b\"}\r` + red("google-api-key")},
		{`out\nDB_PASSWORD=hunter2x9`, `out\nDB_PASSWORD=` + red("assignment")},
		{`env\tPWD=/home/bob\n`, `env\tPWD=/home/bob\n`},
		{`{"url":"postgres:\/\/bob:s3cretpw@db\/app"}`, `{"url":"postgres:\/\/bob:` + red("url-password") + `@db\/app"}`},
		{`\nBearer abcdef0123456789abcdef`, `\nBearer ` + red("bearer")},
	} {
		if got, _ := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestTextLeavesAlone(t *testing.T) {
	for _, in := range []string{
		"the password field is required",
		"Error: token: expired",
		"secret: see vault",
		"api_key: see the docs",
		"Password: ********",
		"passwd: files systemd",
		"Enter your password: ",
		"request id 123e4567-e89b-12d3-a456-426614174000",
		"commit 3f786850e387550fdab836ed7e6dc881de23001b\nAuthor: Jane Doe <jane@example.com>",
		"FROM golang@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
		"token := lexer.Next()\nfor token.Kind != EOF {",
		"type Config struct {\n\tPassword string `json:\"password\"`\n\tToken    string\n}",
		`key := os.Getenv("API_KEY")`,
		`password := os.Getenv("DB_PASSWORD")`,
		`cfg.Password = r.FormValue("password")`,
		"if password == nil {\n\treturn errNoPassword\n}",
		"interface Login { password: string; token?: string }",
		"def login(password: str, token: Optional[str] = None):",
		"https://user@host.example.com/path and https://github.com/a/b and ssh://git@github.com/a/b.git",
		"postgres://localhost:5432/app",
		"pip install sk-learn && echo sk-learn-compatible-estimator",
		"PASSWORD=${DB_PASSWORD}\nTOKEN=$GITHUB_TOKEN\nAPI_KEY=<your-api-key>\nSECRET={{ .Values.secret }}\npassword=\"\"\nsecret: '***'\nDB_PASS=xxxx",
		"--- PASS: TestStore (0.00s)\n--- PASS: TestStore/claims (0.01s)\nPASS\nok  \tgithub.com/acme/app\t0.412s",
		"max_tokens: 4096\nprompt_tokens: 1200\ntokenizer: cl100k_base",
		"PWD=/home/bob/src/app\nOLDPWD=/home/bob",
		"secretName: db-credentials\nsecretKeyRef:\n  name: db\n  key: password",
		"PASSWORD_FILE=/run/secrets/db_password\npassword_min_length: 12",
		"Bearer tokens expire after an hour",
		"AKIA" + strings.Repeat("Q", 15) + " ghp_" + strings.Repeat("a", 35) + " sk-" + strings.Repeat("A", 16) + " glpat-" + strings.Repeat("b", 19),
		"my" + awsKey + " xnpm_" + strings.Repeat("a", 36) + " task-" + strings.Repeat("A1", 10),
		"PASSWORD=$(cat /run/secrets/db)\nset DB_PASSWORD=%DB_PASSWORD%\nprintf 'password=%-8s' \"$pw\"",
		"\tPassword: cfg.Password,\n\tToken: process.env.API_TOKEN,\n\tSecret: settings.SECRET_KEY",
		"Authorization: required",
		"if strings.HasPrefix(line, \"password:\") {\n\turl := \"https://x/?token=\" + tok\n\tlog.Printf(\"token: %v\", tok)",
		"key: 3f786850e387550fdab836ed7e6dc881de23001b",
		"password: ${{ secrets.DOCKER_PASSWORD }}\ntoken: ${{ secrets.GITHUB_TOKEN }}",
		"+   password = (sensitive value)",
		"ERROR: password authentication failed for user \"postgres\"",
		"  - Token: gho_************************************",
		"--token string   the API token (default: $THATCH_TOKEN)\n--password-stdin  read the password from stdin",
		"echo \"$GITHUB_TOKEN\" | docker login ghcr.io -u bob --password-stdin",
		"-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo\n-----END PUBLIC KEY-----",
		`if strings.HasPrefix(line, "-----BEGIN RSA PRIVATE KEY-----") {`,
		"docker run -u 1000:1000 app && git push -u origin main",
		"author: Jane\nsecretary: Bob\nauthorization_code: flow",
		"case token.IDENT:\n\treturn token::Ident",
		"public_key: AAAAC3NzaC1lZDI1NTE5AAAAIGhdHWpDPV7S9X1x",
		"the key: value pairs are sorted; monkey: a1b2",
		"eyJhbGciOiJIUzI1NiJ9 alone is just a header",
		"</private> without an opening tag",
		"",
	} {
		got, counts := Text(in)
		if got != in || counts != nil {
			t.Errorf("Text(%q)\n got %q, %v\nwant it unchanged", in, got, counts)
		}
	}
}

func TestTextPrivate(t *testing.T) {
	tests := []struct {
		name, in, want string
		n              int
	}{
		{"closed", "a <private>my address</private> b", "a  b", 1},
		{"two blocks", "<private>x</private>1<private>y</private>2", "12", 2},
		{"unclosed removes to the end", "keep <private>secret\nmore\n", "keep ", 1},
		{"case", "a<PRIVATE>x</Private>b<pRiVaTe>y", "ab", 2},
		{"nested", "a<private>b<private>c</private>d</private>e", "ae", 1},
		{"nested unclosed", "a<private>b<private>c</private>d", "a", 1},
		{"stray close kept", "a</private>b", "a</private>b", 0},
		{"multiline", "line1\n<private>\nline2\n</private>\nline3", "line1\n\nline3", 1},
		{"tag formed by a removal", "<priv<private>x</private>ate>secret", "", 2},
		{"secret inside private", "<private>" + ghToken + "</private> ok", " ok", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, counts := Text(tt.in)
			if got != tt.want {
				t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if counts["private"] != tt.n || counts.Total() != tt.n {
				t.Errorf("counts = %v, want private: %d", counts, tt.n)
			}
			checkIdempotent(t, got)
		})
	}
}

func checkIdempotent(t *testing.T, once string) {
	t.Helper()
	twice, counts := Text(once)
	if twice != once || counts != nil {
		t.Errorf("not idempotent: Text(%q) = %q, %v", once, twice, counts)
	}
	checkOnePass(t, once)
}

// checkOnePass checks that one pass reaches the fixed point on its own: Text's later
// passes are a safety net, and must find nothing.
func checkOnePass(t *testing.T, s string) {
	t.Helper()
	var c Counts
	once, _ := pass(s, &c)
	if twice, n := pass(once, &c); n != 0 {
		t.Errorf("a second pass over %q redacted %d more:\n once %q\ntwice %q", s, n, once, twice)
	}
}

func TestCounts(t *testing.T) {
	c := make(Counts)
	c.Add(Counts{"jwt": 1, "bearer": 2})
	c.Add(Counts{"jwt": 3})
	c.Add(nil)
	if c.Total() != 6 || c["jwt"] != 4 || c["bearer"] != 2 {
		t.Errorf("counts = %v", c)
	}
	if Counts(nil).Total() != 0 {
		t.Error("nil Total")
	}
}

func TestTextKeepsUTF8(t *testing.T) {
	in := "日本語 password=秘密のパスワード ✓ <private>私</private> ghp_" + strings.Repeat("a1", 18) + "é"
	got, _ := Text(in)
	if !utf8.ValidString(got) {
		t.Errorf("invalid UTF-8: %q", got)
	}
	if strings.Contains(got, "秘密") || strings.Contains(got, "私") {
		t.Errorf("not redacted: %q", got)
	}
}

// Text shares no state between calls: run it from many goroutines under -race.
func TestTextConcurrent(t *testing.T) {
	in := "GITHUB_TOKEN=" + ghToken + " <private>x</private> password: hunter2"
	want, _ := Text(in)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got, _ := Text(in); got != want {
					t.Errorf("got %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
