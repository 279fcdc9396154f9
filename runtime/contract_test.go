package runtime_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/thatch-dev/thatch/internal/testkit"
)

// The code, the scenario scripts and the docs cite the wire contract as "rule N" and "§N".
// docs/contract.md gives each section a heading "## §N — …" and each rule a heading
// "### Rule N — …", so that a reader with only the clone finds what is cited. These tests
// keep it that way: a citation without its heading, or a link into a Markdown file of the
// repository that points at no heading, fails with the file and line that holds it.

// contractFile is the contract, relative to the module root.
const contractFile = "docs/contract.md"

var (
	// citeRule matches "rule 7", "Rule 12", "rules 8 and 9", "rules 3, 4 and 6",
	// "rules 12-13".
	citeRule = regexp.MustCompile(`(?i)\brules?\s+(\d+(?:\s*(?:,|and|or|to|-|–)\s*\d+)*)`)
	// citeSection matches "§7", "§ 7", "protocol 1.1 §2".
	citeSection = regexp.MustCompile(`§\s?(\d+)`)
	// ruleHeading and sectionHeading are the contract's anchored headings' texts.
	ruleHeading    = regexp.MustCompile(`^Rule (\d+) — \S`)
	sectionHeading = regexp.MustCompile(`^§(\d+) — \S`)
	// mdLink is a Markdown inline link's target: [text](target) or [text](target "title").
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
)

// TestContractCitations: every "rule N" and "§N" in the project's own files has its
// heading in docs/contract.md.
func TestContractCitations(t *testing.T) {
	root := testkit.ModuleRoot(t)
	contract := readHeadings(t, filepath.Join(root, contractFile))
	if len(contract.rules) == 0 || len(contract.sections) == 0 {
		t.Fatalf("%s has no \"### Rule N — …\" or no \"## §N — …\" heading", contractFile)
	}
	files := projectFiles(t, root)
	cited := 0
	for _, path := range files {
		rel, _ := filepath.Rel(root, path)
		eachLine(t, path, func(n int, line string) {
			for _, m := range citeRule.FindAllStringSubmatch(line, -1) {
				for _, rule := range citedNumbers(m[1]) {
					cited++
					if !contract.rules[rule] {
						t.Errorf("%s:%d: cites rule %d, which %s has no heading for (\"### Rule %d — …\")",
							rel, n, rule, contractFile, rule)
					}
				}
			}
			for _, m := range citeSection.FindAllStringSubmatch(line, -1) {
				sec, _ := strconv.Atoi(m[1])
				cited++
				if !contract.sections[sec] {
					t.Errorf("%s:%d: cites §%d, which %s has no heading for (\"## §%d — …\")",
						rel, n, sec, contractFile, sec)
				}
			}
		})
	}
	if cited == 0 {
		t.Fatalf("found no citation of the contract in %d files under %s: is the scan broken?", len(files), root)
	}
}

// TestContractLinks: every link from a Markdown file of the repository to a Markdown file
// of the repository (docs/protocol.md's links into the contract, the contract's own
// cross-references) names an existing file and, with a #fragment, one of its headings as
// GitHub anchors them.
func TestContractLinks(t *testing.T) {
	root := testkit.ModuleRoot(t)
	headings := map[string]*mdHeadings{}
	anchors := func(path string) *mdHeadings {
		if h, ok := headings[path]; ok {
			return h
		}
		h := readHeadings(t, path)
		headings[path] = h
		return h
	}
	links := 0
	for _, path := range projectFiles(t, root) {
		if filepath.Ext(path) != ".md" {
			continue
		}
		rel, _ := filepath.Rel(root, path)
		fenced := false
		eachLine(t, path, func(n int, line string) {
			if isFence(line) {
				fenced = !fenced
			}
			if fenced {
				return
			}
			for _, m := range mdLink.FindAllStringSubmatch(stripCode(line), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
				}
				if filepath.Ext(dest) != ".md" {
					continue
				}
				links++
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %q: no such file", rel, n, target)
					continue
				}
				if frag != "" && !anchors(dest).slugs[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", rel, n, target, filepath.Base(dest), frag)
				}
			}
		})
	}
	if links == 0 {
		t.Fatal("found no link between the repository's Markdown files: is the scan broken?")
	}
}

// TestContractSlug pins the anchor rules GitHub applies, which the links rely on.
func TestContractSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Rule 7 — host restart":                   "rule-7--host-restart",
		"§8 — The operator's HTTP endpoint":       "8--the-operators-http-endpoint",
		"Events: host → thatch":                   "events-host--thatch",
		"Access ([§7](contract.md#x)), as thatch": "access-7-as-thatch",
		"The `status.json` file, **bold**":        "the-statusjson-file-bold",
		"snake_case and CamelCase":                "snake_case-and-camelcase",
	} {
		if got := slug(headingText(heading)); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// mdHeadings is what one Markdown file's headings offer: GitHub anchors, and for the
// contract the rules and sections that have a heading.
type mdHeadings struct {
	slugs    map[string]bool
	rules    map[int]bool
	sections map[int]bool
}

var atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)

func readHeadings(t *testing.T, path string) *mdHeadings {
	t.Helper()
	h := &mdHeadings{slugs: map[string]bool{}, rules: map[int]bool{}, sections: map[int]bool{}}
	seen := map[string]int{}
	fenced := false
	eachLine(t, path, func(_ int, line string) {
		if isFence(line) {
			fenced = !fenced
		}
		if fenced {
			return
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		text := headingText(m[1])
		// GitHub numbers repeated anchors: x, x-1, x-2, …
		s := slug(text)
		if n := seen[s]; n > 0 {
			seen[s] = n + 1
			s = s + "-" + strconv.Itoa(n)
		} else {
			seen[s] = 1
		}
		h.slugs[s] = true
		if r := ruleHeading.FindStringSubmatch(text); r != nil {
			n, _ := strconv.Atoi(r[1])
			h.rules[n] = true
		}
		if r := sectionHeading.FindStringSubmatch(text); r != nil {
			n, _ := strconv.Atoi(r[1])
			h.sections[n] = true
		}
	})
	return h
}

var inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// headingText is a heading as rendered text: links reduced to their text, code spans and
// emphasis markers dropped.
func headingText(s string) string {
	s = inlineLink.ReplaceAllString(s, "$1")
	return strings.NewReplacer("`", "", "**", "", "*", "").Replace(s)
}

// slug is GitHub's anchor for a heading's text (github-slugger): lower-cased; every
// character that is not a letter, a mark, a number, '_', '-' or a space dropped; each
// space then a '-'. "Rule 7 — host restart" → "rule-7--host-restart".
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsNumber(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// citedNumbers expands a citation's numbers: "3, 4 and 6" → 3 4 6; "12-13" → 12 13.
func citedNumbers(s string) []int {
	nums := regexp.MustCompile(`\d+|-|–|\bto\b`).FindAllString(s, -1)
	var out []int
	for i := 0; i < len(nums); i++ {
		n, err := strconv.Atoi(nums[i])
		if err != nil {
			continue
		}
		if i >= 2 && (nums[i-1] == "-" || nums[i-1] == "–" || nums[i-1] == "to") {
			if from, err := strconv.Atoi(nums[i-2]); err == nil && from < n && n-from < 100 {
				for k := from + 1; k < n; k++ {
					out = append(out, k)
				}
			}
		}
		out = append(out, n)
	}
	return out
}

func isFence(line string) bool {
	l := strings.TrimSpace(line)
	return strings.HasPrefix(l, "```") || strings.HasPrefix(l, "~~~")
}

var codeSpan = regexp.MustCompile("`[^`]*`")

func stripCode(line string) string { return codeSpan.ReplaceAllString(line, "") }

// projectFiles lists the files the project writes that may cite the contract: Go, SQL,
// JavaScript, shell, HTML and Markdown anywhere, and the scenario scripts. Directories
// whose names start with "." and node_modules are skipped.
func projectFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".go", ".sql", ".js", ".sh", ".html", ".md":
			out = append(out, path)
		case ".txt":
			if filepath.Base(filepath.Dir(path)) == "scenarios" {
				out = append(out, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func eachLine(t *testing.T, path string, fn func(n int, line string)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		fn(n, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
