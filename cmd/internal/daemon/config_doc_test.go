package daemon

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/internal/testkit"
)

// configDoc is the configuration's documentation, relative to the module root.
const configDoc = "docs/configuration.md"

// TestConfigDocumented: docs/configuration.md's tables name exactly the environment variables
// thatch reads (every field of Config, as THATCH_<tag>, and every name a product file reads
// with os.Getenv or os.LookupEnv), each Config default is the one its row gives, and the doc
// names nothing the code does not read.
func TestConfigDocumented(t *testing.T) {
	root := testkit.ModuleRoot(t)
	rows := docRows(t, filepath.Join(root, configDoc))
	if len(rows) < 10 {
		t.Fatalf("%s: found %d variables in its tables: is the parse broken?", configDoc, len(rows))
	}

	// What the code reads: Config's fields, envconfig's fallback to the bare tag, and the
	// product files' own lookups.
	read := map[string]string{}   // name → where the code reads it
	fallback := map[string]bool{} // envconfig also reads each tag without the prefix
	defaults := map[string]string{}
	ct := reflect.TypeOf(Config{})
	for i := range ct.NumField() {
		f := ct.Field(i)
		if f.Tag.Get("ignored") == "true" {
			continue
		}
		tag := f.Tag.Get("envconfig")
		if tag == "" {
			t.Errorf("Config.%s has no envconfig tag: name its variable", f.Name)
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			t.Errorf("Config.%s is a struct: teach this test envconfig's names for its fields", f.Name)
			continue
		}
		name := "THATCH_" + tag
		read[name] = "Config." + f.Name
		fallback[tag] = true
		if d, ok := f.Tag.Lookup("default"); ok {
			defaults[name] = d
		}
	}
	for name, where := range envLookups(t, root) {
		if _, ok := read[name]; !ok {
			read[name] = where
		}
	}

	for name, where := range read {
		if _, ok := rows[name]; !ok {
			t.Errorf("%s reads %s, which %s does not name in a table: add its row", where, name, configDoc)
		}
	}
	for name, row := range rows {
		if _, ok := read[name]; !ok && !fallback[name] {
			t.Errorf("%s:%d names %s, which thatch does not read: drop it, or read it in Config", configDoc, row.line, name)
		}
	}
	for name, d := range defaults {
		row, ok := rows[name]
		if ok && !strings.Contains(row.cells[1], "`"+d+"`") {
			t.Errorf("%s:%d: %s's default is %q in Config, and its row says %q", configDoc, row.line, name, d, row.cells[1])
		}
	}
}

type docRow struct {
	line  int
	cells []string
}

var (
	envName = regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")
	// cellSep splits a table row at its pipes, with the spaces around them.
	cellSep = regexp.MustCompile(`\s*\|\s*`)
)

// docRows reads the Markdown tables of path: each variable named in a row's first cell,
// with that row.
func docRows(t *testing.T, path string) map[string]docRow {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]docRow{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| ---") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := cellSep.Split(strings.Trim(line, "|"), -1)
		if len(cells) < 3 {
			continue
		}
		for _, m := range envName.FindAllStringSubmatch(cells[0], -1) {
			if prev, dup := rows[m[1]]; dup {
				t.Errorf("%s:%d names %s again (first at line %d)", configDoc, i+1, m[1], prev.line)
			}
			rows[m[1]] = docRow{line: i + 1, cells: cells}
		}
	}
	return rows
}

// envLookups finds the literal names the module's product files (not its tests) pass to
// os.Getenv and os.LookupEnv, with the file and line of one.
func envLookups(t *testing.T, root string) map[string]string {
	t.Helper()
	found := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !slices.Contains([]string{"Getenv", "LookupEnv"}, sel.Sel.Name) {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "os" {
				return true
			}
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if name, err := strconv.Unquote(lit.Value); err == nil {
					rel, _ := filepath.Rel(root, path)
					found[name] = rel + ":" + strconv.Itoa(fset.Position(call.Pos()).Line)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("found no os.Getenv or os.LookupEnv in the module: is the scan broken?")
	}
	return found
}
