package runtime

import (
	"encoding/json"
	"path"
	"strings"
)

// What thatch leaves out of an entry (issue 14): the output of a read of a file that holds
// credentials. Redaction (rule 13) catches secrets it recognises; a .env file, a private
// key or a cloud credentials file is all secrets, most of them in shapes no rule knows, and
// nothing in it is worth a memory. Such an entry keeps its tool, args and title, which say
// that the file was read, and is trivial (TrivialEntry).

// sensitiveNames are base names (lower-cased) of credential files.
var sensitiveNames = map[string]bool{
	".env": true, ".netrc": true, "_netrc": true, ".npmrc": true, ".pypirc": true, ".pgpass": true,
	".git-credentials": true, ".htpasswd": true, ".dockercfg": true, "credentials": true,
	"credentials.json": true, "credentials.yaml": true, "credentials.yml": true, "credentials.toml": true,
	"secrets.json": true, "secrets.yaml": true, "secrets.yml": true, "secrets.toml": true, "kubeconfig": true,
	"id_rsa": true, "id_dsa": true, "id_ecdsa": true, "id_ed25519": true, "id_ecdsa_sk": true, "id_ed25519_sk": true,
	"terraform.tfstate": true, "terraform.tfstate.backup": true,
}

// sensitiveExts are extensions (lower-cased) of key stores and secret files.
var sensitiveExts = map[string]bool{
	".pem": true, ".key": true, ".p12": true, ".pfx": true, ".jks": true, ".keystore": true, ".ppk": true,
	".tfvars": true, ".tfstate": true, ".env": true, ".age": true, ".gpg": true, ".kdbx": true,
}

// envTemplates are .env variants that hold names and placeholders, not secrets: reading
// one says what a project needs, which is worth remembering.
var envTemplates = map[string]bool{"example": true, "sample": true, "template": true, "dist": true, "defaults": true, "schema": true}

// SensitivePath reports whether p names a credentials file.
func SensitivePath(p string) bool {
	base := strings.ToLower(path.Base(strings.ReplaceAll(strings.TrimSpace(p), "\\", "/")))
	if sensitiveNames[base] {
		return true
	}
	if rest, ok := strings.CutPrefix(base, ".env."); ok {
		return !envTemplates[rest]
	}
	ext := path.Ext(base)
	if ext == ".json" && (strings.Contains(base, "service-account") || strings.Contains(base, "serviceaccount")) {
		return true
	}
	return sensitiveExts[ext]
}

// readCommands are shell commands that print a file's content.
var readCommands = map[string]bool{
	"cat": true, "head": true, "tail": true, "less": true, "more": true, "bat": true, "batcat": true, "strings": true,
	"xxd": true, "od": true, "hexdump": true, "base64": true, "nl": true, "tac": true, "sed": true, "awk": true,
	"grep": true, "rg": true, "jq": true, "yq": true, "source": true, ".": true, "type": true, "view": true,
}

// SensitiveRead returns the base name of the credentials file whose content the call of
// tool with args printed, or "" when it printed none: a file tool (any args field naming
// the file), or a shell command that reads one.
func SensitiveRead(tool string, args json.RawMessage) string {
	var m map[string]json.RawMessage
	if len(args) == 0 || json.Unmarshal(args, &m) != nil {
		return ""
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(m[k], &s)
		return s
	}
	switch tool {
	case "bash", "shell", "sh", "exec":
		return shellReads(str("command"))
	case "write", "edit", "patch", "multiedit":
		return "" // their output is a confirmation, not the file
	}
	for _, k := range []string{"filePath", "file_path", "path", "file", "filename"} {
		if p := str(k); p != "" && SensitivePath(p) {
			return path.Base(strings.ReplaceAll(p, "\\", "/"))
		}
	}
	return ""
}

// shellReads returns the first credentials file a reading command of cmd names, or "".
func shellReads(cmd string) string {
	for _, seg := range strings.FieldsFunc(cmd, func(r rune) bool { return r == '|' || r == ';' || r == '&' || r == '\n' || r == '(' || r == ')' }) {
		words := strings.Fields(seg)
		if len(words) == 0 || !readCommands[path.Base(words[0])] {
			continue
		}
		for _, w := range words[1:] {
			w = strings.Trim(w, `"'<>`)
			if !strings.HasPrefix(w, "-") && SensitivePath(w) {
				return path.Base(w)
			}
		}
	}
	return ""
}

// LeftOut is the output kept in place of a credentials file's content.
func LeftOut(file string) string {
	return "[thatch: output left out: " + cut(file, 64) + " holds credentials]"
}

// TrivialEntry reports whether nothing can be learned from an entry. Its output, with
// leading and trailing white space trimmed, is then one of:
//   - empty: a tool that returned nothing;
//   - "(no output)", in any case: what opencode records for a shell command that printed
//     nothing;
//   - a LeftOut marker, "[thatch: output left out: …": a credentials file's content.
//
// Only the output is judged, not the tool, args or title. thatch's own tools are never
// entries at all. An idle whose pending entries are all trivial starts no extraction:
// they are dropped instead.
func TrivialEntry(b *Body) bool {
	out := strings.TrimSpace(b.Output)
	return out == "" || strings.EqualFold(out, "(no output)") || strings.HasPrefix(out, "[thatch: output left out: ")
}
