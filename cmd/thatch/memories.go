package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

const memoriesUsage = `usage:
  thatch memories [--project P] [--search Q] [--kind K] [--limit N] [--json]
                                      list live memories (newest first, or best match with --search)
  thatch memories projects [--project P] [--json]
                                      the projects with memories: folder, key, how many
  thatch memories show ID [--json]    one memory and its history
  thatch memories forget ID [--reason R]
                                      forget a memory (it leaves search and injection; its history stays)
  thatch memories restore ID          bring a forgotten memory back
  thatch memories export [--project P] > FILE.jsonl
                                      every live memory as JSON Lines
  thatch memories import FILE.jsonl   add the memories of an export (- reads standard input); importing twice changes nothing
  thatch memories hygiene [--project P] [--json]
                                      duplicate pairs, stale memories and memories of deleted branches, with their texts
  thatch memories dismiss ID OTHER    two memories flagged as duplicates say different things: stop pairing them

--project P is a project's folder (. for the current one), a folder inside it, or its key.`

// exportPage is how many memories one export request asks for, and listMemoriesPage one
// listing request; the daemon cuts a page shorter to fit the broker's max_payload.
const (
	exportPage       = 500
	listMemoriesPage = 200
)

// importBatchBytes bounds one import request, well under the broker's 1 MiB payload limit
// and short enough to answer quickly.
const importBatchBytes = 128 << 10

// memoriesCmd runs thatch memories and its subcommands against the running daemon.
func memoriesCmd(ctx context.Context, c Config, args []string, out io.Writer) error {
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("memories "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	project := fs.String("project", "", "only this project: its folder, a folder inside it, or its key")
	search := fs.String("search", "", "best matches of this text")
	kind := fs.String("kind", "", "only this kind")
	limit := fs.Int("limit", 100, "at most this many")
	reason := fs.String("reason", "", "why (forget)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		_, err := fmt.Fprintln(out, memoriesUsage)
		return err
	}
	if err != nil {
		return fmt.Errorf("%v\n%s", err, memoriesUsage)
	}
	want := map[string]int{"list": 0, "projects": 0, "show": 1, "forget": 1, "restore": 1, "export": 0, "import": 1, "hygiene": 0, "dismiss": 2}
	n, ok := want[sub]
	if !ok {
		return fmt.Errorf("unknown subcommand %q\n%s", sub, memoriesUsage)
	}
	if len(pos) != n {
		return fmt.Errorf("thatch memories %s takes %d %s, got %q\n%s", sub, n, runtime.Plural(n, "argument", "arguments"), pos, memoriesUsage)
	}
	nc, err := dial(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	if *project != "" {
		if *project, err = projectName(ctx, nc, c, *project); err != nil {
			return err
		}
	}
	switch sub {
	case "projects":
		raw, err := call(ctx, nc, c, "memory.projects", map[string]any{"project": *project})
		if err != nil {
			return err
		}
		if *asJSON {
			_, err := fmt.Fprintln(out, string(raw))
			return err
		}
		var ps []memory.Project
		if err := json.Unmarshal(raw, &ps); err != nil {
			return err
		}
		if len(ps) == 0 {
			fmt.Fprintln(out, "no memories")
			return nil
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FOLDER\tKEY\tMEMORIES")
		for _, p := range ps {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", cmp.Or(p.Folder, "-"), p.Key, p.Memories)
		}
		return tw.Flush()
	case "list":
		var raw json.RawMessage
		if *search != "" { // best matches: one page
			raw, err = call(ctx, nc, c, "memories", map[string]any{"project": *project, "query": *search, "kind": *kind, "limit": *limit})
		} else { // newest first, in pages that fit the broker
			if *limit < 1 {
				return fmt.Errorf("--limit must be 1 or more, got %d", *limit)
			}
			raw, err = pages(ctx, nc, c, "memories", map[string]any{"project": *project, "kind": *kind}, min(*limit, listMemoriesPage), *limit)
		}
		if err != nil {
			return err
		}
		if *asJSON {
			_, err := fmt.Fprintln(out, string(raw))
			return err
		}
		var ms []memory.Memory
		if err := json.Unmarshal(raw, &ms); err != nil {
			return err
		}
		if len(ms) == 0 {
			fmt.Fprintln(out, "no memories")
			return nil
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tPROJECT\tUPDATED\tCONTENT")
		for _, m := range ms {
			// The key is most often opencode's project id, a hash: the folder says more.
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Kind, cmp.Or(m.Folder, m.Project), m.UpdatedAt.Local().Format("2006-01-02 15:04"), oneLine(m.Content, 80))
		}
		return tw.Flush()
	case "show":
		raw, err := call(ctx, nc, c, "memory.get", map[string]any{"id": pos[0]})
		if err != nil {
			return err
		}
		if *asJSON {
			_, err := fmt.Fprintln(out, string(raw))
			return err
		}
		var r struct {
			Memory memory.Memory  `json:"memory"`
			Audit  []memory.Audit `json:"audit"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		m := r.Memory
		if m.Folder == m.Project {
			m.Folder = "" // a folder outside git is its own key: said once
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		rows := [][2]string{{"id", m.ID}, {"project", m.Project}, {"folder", m.Folder}, {"kind", m.Kind}, {"tags", strings.Join(m.Tags, ", ")},
			{"branch", m.Branch}, {"created", stamp(&m.CreatedAt)}, {"updated", stamp(&m.UpdatedAt)}, {"used", stamp(m.UsedAt)},
			{"source", strings.TrimSuffix(m.Source.SessionID+" "+m.Source.CallID, " ")}, {"forgotten", stamp(m.ForgottenAt)}}
		for _, row := range rows {
			if row[1] != "" {
				fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
			}
		}
		tw.Flush()
		fmt.Fprintf(out, "\n%s\n", m.Content)
		if len(r.Audit) > 0 {
			fmt.Fprintln(out, "\nhistory:")
			for _, a := range r.Audit {
				line := fmt.Sprintf("  %s %s", a.At.Local().Format("2006-01-02 15:04:05"), a.Op)
				if a.SessionID != "" {
					line += " by " + a.SessionID
				}
				if a.Reason != "" {
					line += ": " + a.Reason
				}
				fmt.Fprintln(out, line)
				if a.Before != "" {
					fmt.Fprintf(out, "    before: %s\n", oneLine(a.Before, 200))
				}
			}
		}
		return nil
	case "forget":
		if _, err := call(ctx, nc, c, "memory.forget", map[string]any{"id": pos[0], "reason": *reason}); err != nil {
			return err
		}
		fmt.Fprintf(out, "forgot %s (thatch memories show %s keeps its history)\n", pos[0], pos[0])
		return nil
	case "restore":
		if _, err := call(ctx, nc, c, "memory.restore", map[string]any{"id": pos[0]}); err != nil {
			return err
		}
		fmt.Fprintf(out, "restored %s\n", pos[0])
		return nil
	case "export":
		w := bufio.NewWriter(out)
		after, total := "", 0
		for {
			// cursor asks for a page (cut to fit the broker, nextCursor saying whether
			// more follow); a daemon from before pages reads after and answers an array.
			raw, err := call(ctx, nc, c, "memory.export", map[string]any{"project": *project, "after": after, "cursor": after, "limit": exportPage})
			if err != nil {
				return err
			}
			var page []json.RawMessage
			var next string
			if strings.HasPrefix(strings.TrimSpace(string(raw)), "[") {
				if err := json.Unmarshal(raw, &page); err != nil {
					return err
				}
				if len(page) == exportPage {
					next = "more"
				}
			} else {
				var pg natsbus.Page
				if err := json.Unmarshal(raw, &pg); err != nil {
					return err
				}
				page, next = pg.Items, pg.NextCursor
			}
			for _, m := range page {
				w.Write(m)
				w.WriteByte('\n')
				var id struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal(m, &id)
				after = id.ID
			}
			total += len(page)
			if next == "" || len(page) == 0 {
				break
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "exported %d %s\n", total, runtime.Plural(total, "memory", "memories"))
		return nil
	case "import":
		return importMemories(ctx, nc, c, pos[0], out)
	case "dismiss":
		if _, err := call(ctx, nc, c, "memory.dismiss", map[string]any{"id": pos[0], "distinctFrom": pos[1]}); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s and %s are no longer paired (until one of them changes)\n", pos[0], pos[1])
		return nil
	case "hygiene":
		raw, err := call(ctx, nc, c, "memory.signals", map[string]any{"project": *project, "limit": *limit})
		if err != nil {
			return err
		}
		if *asJSON {
			_, err := fmt.Fprintln(out, string(raw))
			return err
		}
		var sigs []memory.Signal
		if err := json.Unmarshal(raw, &sigs); err != nil {
			return err
		}
		if len(sigs) == 0 {
			fmt.Fprintln(out, "nothing to tidy: no duplicate pairs, stale memories or memories of deleted branches")
			return nil
		}
		for _, s := range sigs {
			fmt.Fprintln(out, s.Kind+":")
			for _, m := range s.Memories {
				fmt.Fprintf(out, "  %s (%s) %s\n", m.ID, m.Kind, oneLine(m.Content, 100))
			}
		}
		fmt.Fprintln(out, "\nthe next extraction of each project is asked to resolve them; by hand: thatch memories forget ID, thatch memories dismiss ID OTHER, thatch memories restore ID")
		return nil
	}
	return nil
}

// knownShown is how many known projects the error of a --project that names none lists.
const knownShown = 10

// projectName is what --project names, in the daemon's terms: name itself when it names a
// project (a key, a folder or a folder inside one), else the absolute path of the folder it
// names here (relative, or through a symbolic link), else an error that lists the projects
// there are. A daemon from before memory.projects gets name as it is.
func projectName(ctx context.Context, nc *nats.Conn, c Config, name string) (string, error) {
	tries := []string{name}
	if abs, err := filepath.Abs(name); err == nil {
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
			tries = append(tries, abs)
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				tries = append(tries, real)
			}
		}
	}
	shown := name
	seen := map[string]bool{}
	for _, try := range tries {
		if seen[try] {
			continue
		}
		seen[try] = true
		raw, err := call(ctx, nc, c, "memory.projects", map[string]any{"project": try})
		var herr *runtime.HostError
		if errors.As(err, &herr) && herr.Name == "NotFoundError" && strings.Contains(herr.Message, "no API method") {
			return name, nil
		}
		if err != nil {
			return "", err
		}
		var ps []memory.Project
		if err := json.Unmarshal(raw, &ps); err != nil {
			return "", fmt.Errorf("memory.projects answered what thatch cannot read: %v", err)
		}
		if len(ps) > 0 {
			return try, nil
		}
		if filepath.IsAbs(try) {
			shown = try
		}
	}
	raw, err := call(ctx, nc, c, "memory.projects", map[string]any{})
	if err != nil {
		return "", err
	}
	var ps []memory.Project
	if err := json.Unmarshal(raw, &ps); err != nil {
		return "", fmt.Errorf("memory.projects answered what thatch cannot read: %v", err)
	}
	if len(ps) == 0 {
		return "", fmt.Errorf("no memories of project %s: thatch keeps no memories yet", shown)
	}
	var known []string
	for _, p := range ps[:min(len(ps), knownShown)] {
		known = append(known, cmp.Or(p.Folder, p.Key))
	}
	more := ""
	if len(ps) > knownShown {
		more = fmt.Sprintf(" and %d more", len(ps)-knownShown)
	}
	return "", fmt.Errorf("no memories of project %s (known projects: %s%s): give a project's folder, a folder inside it, or its key; thatch memories projects lists them",
		shown, strings.Join(known, ", "), more)
}

// importMemories sends the memories of a JSON Lines file in batches. A bad line stops the
// import before anything of it is sent, naming the line.
func importMemories(ctx context.Context, nc *nats.Conn, c Config, path string, out io.Writer) error {
	var in io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	var ms []json.RawMessage
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var m memory.Memory
		if err := json.Unmarshal([]byte(text), &m); err != nil || m.ID == "" || m.Project == "" {
			return fmt.Errorf("%s:%d: not a memory of thatch memories export (want a JSON object with id, project and content)", path, line)
		}
		ms = append(ms, json.RawMessage(text))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	added := 0
	for start := 0; start < len(ms); {
		end, size := start, 0
		for end < len(ms) && (end == start || size+len(ms[end]) < importBatchBytes) {
			size += len(ms[end])
			end++
		}
		raw, err := callWithin(ctx, nc, c, "memory.import", map[string]any{"memories": ms[start:end]}, time.Minute)
		if err != nil {
			return fmt.Errorf("import (after %d of %d memories): %w", start, len(ms), err)
		}
		var r struct {
			Added int `json:"added"`
		}
		_ = json.Unmarshal(raw, &r)
		added += r.Added
		start = end
	}
	fmt.Fprintf(out, "imported %d of %d %s (%d already here, live or forgotten: thatch memories restore ID brings a forgotten one back)\n",
		added, len(ms), runtime.Plural(len(ms), "memory", "memories"), len(ms)-added)
	return nil
}

// parseInterspersed parses flags that may come before or after positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05")
}
