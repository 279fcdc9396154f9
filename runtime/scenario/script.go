package scenario

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden scenario outputs")

// Cmd is one command of a script.
type Cmd struct {
	Line int
	Name string
	Args map[string]string
	Keys []string // argument keys in order, for flags without values
	Want string
	Note string // the comment lines before the command, kept across a rewrite
}

// Parse reads a script.
func Parse(path string) ([]Cmd, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(data), "\n")
	var cmds []Cmd
	var note []string
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "#") {
			note = append(note, lines[i])
			continue
		}
		if l == "" {
			continue
		}
		c := Cmd{Line: i + 1, Note: strings.Join(note, "\n")}
		note = nil
		fields, err := splitArgs(l)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		c.Name, c.Args = fields[0], map[string]string{}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			c.Args[k] = v
			c.Keys = append(c.Keys, k)
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			return nil, fmt.Errorf("%s:%d: command without a ---- line", path, i+1)
		}
		i += 2
		var want []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			want = append(want, lines[i])
		}
		c.Want = strings.Join(want, "\n")
		cmds = append(cmds, c)
	}
	return cmds, nil
}

// splitArgs splits on spaces, keeping quoted values whole: key="a b", or key='{"a": 1}'
// for values that hold double quotes.
func splitArgs(l string) ([]string, error) {
	var out []string
	var cur strings.Builder
	var quote rune
	for _, r := range l {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '"' || r == '\''):
			quote = r
		case r == ' ' && quote == 0:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote")
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out, nil
}

// Run executes every command of the script at path with exec and compares outputs.
func Run(t *testing.T, path string, exec func(Cmd) string) {
	t.Helper()
	cmds, err := Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	var rewritten strings.Builder
	for _, c := range cmds {
		got := strings.TrimRight(exec(c), "\n")
		if *update {
			if c.Note != "" {
				rewritten.WriteString(c.Note + "\n")
			}
			fmt.Fprintf(&rewritten, "%s\n----\n", c.source())
			if got != "" {
				rewritten.WriteString(got + "\n")
			}
			rewritten.WriteString("\n")
			continue
		}
		if got != c.Want {
			t.Errorf("%s:%d: %s\n--- want\n%s\n--- got\n%s", path, c.Line, c.source(), c.Want, got)
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (c Cmd) source() string {
	parts := []string{c.Name}
	for _, k := range c.Keys {
		v := c.Args[k]
		switch {
		case v == "" && !strings.Contains(k, "="):
			parts = append(parts, k)
		case strings.Contains(v, "\""):
			parts = append(parts, k+"='"+v+"'")
		case strings.ContainsAny(v, " \t"):
			parts = append(parts, k+"=\""+v+"\"")
		default:
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}
