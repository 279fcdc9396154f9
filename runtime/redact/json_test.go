package redact

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

func TestJSON(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   string
		counts Counts
	}{
		{
			name:   "nested objects and arrays, keys and layout kept",
			in:     "{\n  \"tool\": \"bash\",\n  \"args\": {\"command\": \"export GITHUB_TOKEN=" + ghToken + "\", \"env\": [\"A=1\", \"" + awsKey + "\"]},\n  \"n\": 1.50, \"ok\": true, \"x\": null\n}",
			want:   "{\n  \"tool\": \"bash\",\n  \"args\": {\"command\": \"export GITHUB_TOKEN=" + red("github-token") + "\", \"env\": [\"A=1\", \"" + red("aws-access-key") + "\"]},\n  \"n\": 1.50, \"ok\": true, \"x\": null\n}",
			counts: Counts{"github-token": 1, "aws-access-key": 1},
		},
		{
			name:   "a secret key's value is redacted whole",
			in:     `{"user":"bob","password":"hunter2","DB_PASSWORD":"x y z","pin":1234,"api_key":"` + opaque + `","token":"expired","password_hint":"pet"}`,
			want:   `{"user":"bob","password":"` + red("assignment") + `","DB_PASSWORD":"` + red("assignment") + `","pin":1234,"api_key":"` + red("assignment") + `","token":"expired","password_hint":"pet"}`,
			counts: Counts{"assignment": 3},
		},
		{
			name:   "a number under a password key",
			in:     `{"password": 123456}`,
			want:   `{"password": "` + red("assignment") + `"}`,
			counts: Counts{"assignment": 1},
		},
		{
			name:   "array elements take the member's key",
			in:     `{"passwords": ["a1", "b2", ""], "tags": ["x"]}`,
			want:   `{"passwords": ["` + red("assignment") + `", "` + red("assignment") + `", ""], "tags": ["x"]}`,
			counts: Counts{"assignment": 2},
		},
		{
			name:   "escaped string: the secret is found in the decoded text",
			in:     `{"output": "line1\nkey: \"gh\u0070_` + ghToken[4:] + `\"\n\u003cprivate\u003ehome address\u003c/private\u003e<b>"}`,
			want:   `{"output": "line1\nkey: \"` + red("github-token") + `\"\n<b>"}`,
			counts: Counts{"github-token": 1, "private": 1},
		},
		{
			name:   "pem in a service account",
			in:     `{"type":"service_account","private_key":"-----BEGIN PRIVATE KEY-----\n` + strings.ReplaceAll(pemBody, "\n", `\n`) + `-----END PRIVATE KEY-----\n"}`,
			want:   `{"type":"service_account","private_key":"` + red("pem-private-key") + `\n"}`,
			counts: Counts{"pem-private-key": 1},
		},
		{
			name:   "authorization header member",
			in:     `{"headers":{"Authorization":"token 0123abcd","Accept":"application/json"}}`,
			want:   `{"headers":{"Authorization":"token ` + red("authorization") + `","Accept":"application/json"}}`,
			counts: Counts{"authorization": 1},
		},
		{
			name:   "argument vector",
			in:     `{"argv":["docker","login","--password","hunter2","--username","bob","-token","` + opaque + `"]}`,
			want:   `{"argv":["docker","login","--password","` + red("assignment") + `","--username","bob","-token","` + red("assignment") + `"]}`,
			counts: Counts{"assignment": 2},
		},
		{
			name:   "keys are never redacted",
			in:     `{"` + ghToken + `": "value"}`,
			want:   `{"` + ghToken + `": "value"}`,
			counts: nil,
		},
		{
			name:   "top-level string",
			in:     `"Bearer ` + opaque + `"`,
			want:   `"Bearer ` + red("bearer") + `"`,
			counts: Counts{"bearer": 1},
		},
		{
			name:   "invalid JSON is redacted as text",
			in:     "{\"password\": \"hunter2\"\n{\"token\": \"" + ghToken + "\"}",
			want:   "{\"password\": \"" + red("assignment") + "\"\n{\"token\": \"" + red("github-token") + "\"}",
			counts: Counts{"assignment": 1, "github-token": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, counts := JSON([]byte(tt.in))
			if string(got) != tt.want {
				t.Errorf("JSON(%s)\n got %s\nwant %s", tt.in, got, tt.want)
			}
			if !maps.Equal(counts, tt.counts) {
				t.Errorf("counts = %v, want %v", counts, tt.counts)
			}
			if json.Valid([]byte(tt.in)) && !json.Valid(got) {
				t.Errorf("output is not valid JSON: %s", got)
			}
			again, counts := JSON(got)
			if string(again) != string(got) || counts != nil {
				t.Errorf("not idempotent: %s, %v", again, counts)
			}
		})
	}
}

func TestJSONUnchangedReturnsInput(t *testing.T) {
	in := []byte(`{"a": [1, 2, {"b": "c"}], "d": "\u00e9\n"}`)
	got, counts := JSON(in)
	if &got[0] != &in[0] || counts != nil {
		t.Errorf("JSON(%s) = %s, %v; want the input itself", in, got, counts)
	}
}

// A redacted value is re-encoded so that the document stays valid, whatever the value
// held (quotes, control characters, HTML).
func TestJSONReencodes(t *testing.T) {
	in, err := json.Marshal(map[string]string{"out": "a\"b\\c\t<d>&\x01 password=hunter2\n\u2028"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := JSON(in)
	var m map[string]string
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if want := "a\"b\\c\t<d>&\x01 password=" + red("assignment") + "\n\u2028"; m["out"] != want {
		t.Errorf("got %q, want %q", m["out"], want)
	}
}
