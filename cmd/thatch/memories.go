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

	"github.com/thatch-dev/thatch/adapters/natsbus"
	"github.com/thatch-dev/thatch/cmd/internal/daemon"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// thatch memories and its subcommands: the memories the running daemon keeps, each
// subcommand a command of its own (thatch memories itself lists them).

// exportPage is how many memories one export request asks for, and listMemoriesPage one
// listing request; the daemon cuts a page shorter to fit the broker's max_payload.
const (
	exportPage       = 500
	listMemoriesPage = 200
)

// importBatchBytes bounds one import request, well under the broker's 1 MiB payload limit
// and short enough to answer quickly.
const importBatchBytes = 128 << 10

// projectFlag is the --project flag of the memories subcommands that keep to one project.
func projectFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "project", "", "only the project `P`: its folder (. for the current one), a folder inside it, or its key")
}

// dialMemories connects to the daemon, or its files while it is not running (dialRead),
// and makes *project, when set, a name of the daemon's (projectName).
func dialMemories(ctx context.Context, c daemon.Config, project *string) (*conn, error) {
	nc, err := dialRead(c)
	if err != nil {
		return nil, err
	}
	if *project != "" {
		if *project, err = projectName(ctx, nc, c, *project); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return nc, nil
}

// memoriesCommand is thatch memories: the live memories.
type memoriesCommand struct {
	json    bool
	kind    string
	limit   int
	project string
	search  string
}

func (*memoriesCommand) Usage() usage {
	return usage{Name: "memories", Summary: "the live memories, newest first (best match first with --search)"}
}

func (m *memoriesCommand) Flags(fs *flag.FlagSet) {
	jsonFlag(fs, &m.json)
	fs.StringVar(&m.kind, "kind", "", "only memories of kind `K`: "+strings.Join(memory.Kinds, ", "))
	fs.IntVar(&m.limit, "limit", 100, "at most `N` memories")
	projectFlag(fs, &m.project)
	fs.StringVar(&m.search, "search", "", "the best matches of `Q`, best first")
}

func (m *memoriesCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	nc, err := dialMemories(ctx, c, &m.project)
	if err != nil {
		return err
	}
	defer nc.Close()
	var raw json.RawMessage
	if m.search != "" { // best matches: one page
		raw, err = call(ctx, nc, c, protocol.APIMemories, map[string]any{"project": m.project, "query": m.search, "kind": m.kind, "limit": m.limit})
	} else { // newest first, in pages that fit the broker
		if m.limit < 1 {
			return fmt.Errorf("--limit must be 1 or more, got %d", m.limit)
		}
		raw, err = pages(ctx, nc, c, protocol.APIMemories, map[string]any{"project": m.project, "kind": m.kind}, min(m.limit, listMemoriesPage), m.limit)
	}
	if err != nil {
		return err
	}
	if m.json {
		return printJSON(out, raw)
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
	fmt.Fprintln(tw, "ID\tKIND\tPROJECT\tUPDATED\tAUTHOR\tCONTENT")
	for _, mem := range ms {
		// The key is most often opencode's project id, a hash: the folder says more.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", mem.ID, mem.Kind, cmp.Or(mem.Folder, mem.Project), mem.UpdatedAt.Local().Format("2006-01-02 15:04"),
			cmp.Or(mem.Author, "-"), oneLine(mem.Content, 80))
	}
	return tw.Flush()
}

// memoriesProjectsCommand is thatch memories projects.
type memoriesProjectsCommand struct {
	json    bool
	project string
}

func (*memoriesProjectsCommand) Usage() usage {
	return usage{Name: "memories projects", Summary: "the projects with memories: folder, key, how many"}
}

func (m *memoriesProjectsCommand) Flags(fs *flag.FlagSet) {
	jsonFlag(fs, &m.json)
	projectFlag(fs, &m.project)
}

func (m *memoriesProjectsCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	nc, err := dialMemories(ctx, c, &m.project)
	if err != nil {
		return err
	}
	defer nc.Close()
	raw, err := call(ctx, nc, c, protocol.APIMemoryProjects, map[string]any{"project": m.project})
	if err != nil {
		return err
	}
	if m.json {
		return printJSON(out, raw)
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
}

// memoriesShowCommand is thatch memories show.
type memoriesShowCommand struct{ json bool }

func (*memoriesShowCommand) Usage() usage {
	return usage{Name: "memories show", Args: []string{"ID"}, Summary: "one memory and its history"}
}

func (s *memoriesShowCommand) Flags(fs *flag.FlagSet) { jsonFlag(fs, &s.json) }

func (s *memoriesShowCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, args []string) error {
	nc, err := dialRead(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	raw, err := call(ctx, nc, c, protocol.APIMemoryGet, map[string]any{"id": args[0]})
	if err != nil {
		return err
	}
	if s.json {
		return printJSON(out, raw)
	}
	var r struct {
		Memory        memory.Memory  `json:"memory"`
		Audit         []memory.Audit `json:"audit"`
		ExtractedFrom string         `json:"extractedFrom"`
		// Provenance: the calls each extraction that wrote it completed (issue 29).
		Provenance []runtime.Provenance `json:"provenance"`
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
		{"branch", m.Branch}, {"author", m.Author}, {"shared", map[bool]string{true: "with the team"}[m.Shared]}, {"created", stamp(&m.CreatedAt)}, {"updated", stamp(&m.UpdatedAt)}, {"used", stamp(m.UsedAt)},
		{"source", source(m.Source)}, {"extracted from", r.ExtractedFrom}, {"forgotten", stamp(m.ForgottenAt)}}
	for _, row := range rows {
		if row[1] != "" {
			fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
		}
	}
	tw.Flush()
	fmt.Fprintf(out, "\n%s\n", m.Content)
	writeProvenance(out, r.Provenance, r.Audit)
	if len(r.Audit) > 0 {
		fmt.Fprintln(out, "\nhistory:")
		for _, a := range r.Audit {
			line := fmt.Sprintf("  %s %s", a.At.Local().Format("2006-01-02 15:04:05"), a.Op)
			if a.Op == "superseded" && a.Author != "" {
				// A version that lost (§9), at its own time: whose edit, and to whose.
				line = fmt.Sprintf("  %s %s's edit, %s", a.At.Local().Format("2006-01-02 15:04:05"), a.Author, cmp.Or(a.Reason, "superseded"))
				a.Reason, a.Author = "", ""
			}
			if a.SessionID != "" {
				line += " by " + a.SessionID
			}
			if a.Reason != "" {
				line += ": " + a.Reason
			}
			if a.Author != "" { // who made the change (§9): this thatch's author or a teammate
				line += " (author " + a.Author + ")"
			}
			fmt.Fprintln(out, line)
			if a.Before != "" {
				fmt.Fprintf(out, "    before: %s\n", oneLine(a.Before, 200))
			}
		}
	}
	return nil
}

// writeProvenance writes which tool calls fed a memory: for each extraction that wrote it
// (ps, the journal's), what it did to the memory (audit), the session it extracted and the
// calls it completed, "<tool> <title> (<callID>)" a line.
func writeProvenance(out io.Writer, ps []runtime.Provenance, audit []memory.Audit) {
	for i, p := range ps {
		verb := "extracted from session " + p.Session + " by extraction " + p.Extraction
		switch memory.WroteAs(audit, p.Extraction) {
		case "update":
			verb = "updated" + strings.TrimPrefix(verb, "extracted")
		case "forget":
			verb = "forgotten" + strings.TrimPrefix(verb, "extracted")
		}
		if i == 0 {
			fmt.Fprintln(out)
		}
		if len(p.Calls) == 0 {
			fmt.Fprintf(out, "%s, from no call thatch kept\n", verb)
			continue
		}
		fmt.Fprintf(out, "%s, from calls:\n", verb)
		for _, c := range p.Calls {
			line := "  " + c.Tool
			if t := oneLine(c.Title, 120); t != "" {
				line += " " + t
			}
			fmt.Fprintf(out, "%s (%s)\n", line, c.ID)
		}
		if p.More > 0 {
			fmt.Fprintf(out, "  … and %d more\n", p.More)
		}
	}
}

// memoriesForgetCommand is thatch memories forget.
type memoriesForgetCommand struct{ reason string }

func (*memoriesForgetCommand) Usage() usage {
	return usage{Name: "memories forget", Args: []string{"ID"}, Summary: "forget a memory (it leaves search and injection; its history stays)"}
}

func (f *memoriesForgetCommand) Flags(fs *flag.FlagSet) {
	fs.StringVar(&f.reason, "reason", "", "the reason `R`, kept in its history")
}

func (f *memoriesForgetCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, args []string) error {
	nc, err := dial(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := call(ctx, nc, c, protocol.APIMemoryForget, map[string]any{"id": args[0], "reason": f.reason}); err != nil {
		return err
	}
	fmt.Fprintf(out, "forgot %s (thatch memories show %s keeps its history)\n", args[0], args[0])
	return nil
}

// memoriesRestoreCommand is thatch memories restore.
type memoriesRestoreCommand struct{}

func (*memoriesRestoreCommand) Usage() usage {
	return usage{Name: "memories restore", Args: []string{"ID"}, Summary: "bring a forgotten memory back"}
}

func (*memoriesRestoreCommand) Flags(*flag.FlagSet) {}

func (*memoriesRestoreCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, args []string) error {
	nc, err := dial(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := call(ctx, nc, c, protocol.APIMemoryRestore, map[string]any{"id": args[0]}); err != nil {
		return err
	}
	fmt.Fprintf(out, "restored %s\n", args[0])
	return nil
}

// memoriesShareCommand is thatch memories share and thatch memories unshare (§9).
type memoriesShareCommand struct {
	unshare bool
	project string
}

func (s *memoriesShareCommand) Usage() usage {
	if s.unshare {
		return usage{Name: "memories unshare", Summary: "stop sharing a project's memories with the team (those already here stay)"}
	}
	return usage{Name: "memories share", Summary: "share a project's memories with the team (THATCH_TEAM_URL)"}
}

func (s *memoriesShareCommand) Flags(fs *flag.FlagSet) {
	fs.StringVar(&s.project, "project", "", "the project `P`: its key, or a folder of its git checkout (default: the current folder)")
}

func (s *memoriesShareCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	nc, err := dial(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	req := map[string]any{"project": s.project, "shared": !s.unshare}
	if dir, ok := folderArg(cmp.Or(s.project, ".")); ok {
		key, top, err := checkoutKey(ctx, dir)
		if err != nil {
			return err
		}
		req["project"] = key
		if key != dir {
			req["checkout"] = top
			fmt.Fprintf(out, "project %s: the git checkout %s, keyed by its root commit as thatch mcp and opencode key it\n", key, top)
		}
	}
	raw, err := call(ctx, nc, c, protocol.APIMemoryShare, req)
	if err != nil {
		return err
	}
	var r struct {
		Project string `json:"project"`
		Shared  bool   `json:"shared"`
		Outbox  int    `json:"outbox"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	switch {
	case r.Shared:
		fmt.Fprintf(out, "sharing project %s with the team (thatch status shows the team, and whether its server refuses the project)\n", r.Project)
	case r.Outbox > 0:
		fmt.Fprintf(out, "no longer sharing project %s; its memories stay here, and its %d unsent %s stay in the outbox (nothing is lost: they go if you share it again)\n",
			r.Project, r.Outbox, plural(r.Outbox, "version", "versions"))
	default:
		fmt.Fprintf(out, "no longer sharing project %s; its memories stay here\n", r.Project)
	}
	return nil
}

// folderArg is the absolute path of the folder name names, and whether it names one.
func folderArg(name string) (string, bool) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return "", false
	}
	fi, err := os.Stat(abs)
	return abs, err == nil && fi.IsDir()
}

// checkoutKey is the project key of the folder dir and the folder naming that project,
// keyed as thatch mcp keys its project (memory.ProjectKeyOf): its git checkout's root
// commit and top folder, else dir itself.
func checkoutKey(ctx context.Context, dir string) (key, folder string, err error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	key, folder, err = memory.ProjectKeyOf(gctx, dir)
	if err != nil {
		return "", "", fmt.Errorf("key the project of %s by its git history: %w", dir, err)
	}
	return key, folder, nil
}

// memoriesAddCommand is thatch memories add: memory_remember from the command line, for a
// person who wants the team (or the next session) to know something now.
type memoriesAddCommand struct {
	kind    string
	tags    string
	project string
}

func (*memoriesAddCommand) Usage() usage {
	return usage{Name: "memories add", Args: []string{"TEXT"},
		Summary: "remember TEXT (- reads standard input) in a project, as memory_remember does; prints its id"}
}

func (a *memoriesAddCommand) Flags(fs *flag.FlagSet) {
	fs.StringVar(&a.kind, "kind", "", "its kind `K`: "+strings.Join(memory.Kinds, ", ")+" (default: memory_remember's)")
	fs.StringVar(&a.tags, "tags", "", "its tags `T`, comma-separated")
	fs.StringVar(&a.project, "project", "", "the project `P`: a folder of it (default: the current folder, keyed as thatch mcp keys it) or its key")
}

func (a *memoriesAddCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, args []string) error {
	text := args[0]
	if text == "-" {
		// Bounded: a memory is at most memory.MaxContent characters of up to 4 bytes.
		data, err := io.ReadAll(io.LimitReader(os.Stdin, 4*memory.MaxContent+1))
		if err != nil {
			return fmt.Errorf("read the memory from standard input: %w", err)
		}
		if len(data) > 4*memory.MaxContent {
			return fmt.Errorf("standard input holds more than a memory may (%d characters): say it shorter, or in several memories", memory.MaxContent)
		}
		text = string(data)
	}
	nc, err := dial(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	project, directory := a.project, ""
	if dir, ok := folderArg(cmp.Or(project, ".")); ok {
		if project, directory, err = checkoutKey(ctx, dir); err != nil {
			return err
		}
	} else if project, err = projectName(ctx, nc, c, project); err != nil {
		return err
	}
	remember := map[string]any{"content": text}
	if a.kind != "" {
		remember["kind"] = a.kind
	}
	if a.tags != "" {
		var tags []string
		for t := range strings.SplitSeq(a.tags, ",") {
			if t = strings.TrimSpace(t); t != "" {
				tags = append(tags, t)
			}
		}
		remember["tags"] = tags
	}
	// The memory tool itself, called with the project instead of a session as thatch mcp
	// calls it (§10): the same rules, limits and answer as memory_remember.
	req, err := json.Marshal(map[string]any{"project": project, "directory": directory, "args": remember, "source": map[string]string{"host": "cli"}})
	if err != nil {
		return err
	}
	subject := c.APIPrefix + ".tool." + runtime.ToolRemember
	rctx, cancel := context.WithTimeout(ctx, c.HostTimeout()+2*time.Second)
	defer cancel()
	msg, err := nc.nc.RequestWithContext(rctx, subject, req)
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	raw, herr, err := protocol.Decode(msg.Data)
	if err != nil {
		return fmt.Errorf("%s answered what thatch cannot read: %v", subject, err)
	}
	if herr != nil {
		return herr
	}
	var r struct {
		Output   string `json:"output"`
		Metadata struct {
			ID      string `json:"id"`
			Created bool   `json:"created"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Metadata.ID == "" {
		return fmt.Errorf("memory_remember answered what thatch cannot read (%v): run thatch and its CLI of the same version", err)
	}
	if r.Metadata.Created {
		fmt.Fprintf(out, "%s\n", r.Metadata.ID)
	} else {
		fmt.Fprintf(out, "%s (already remembered: the same text)\n", r.Metadata.ID)
	}
	return nil
}

// memoriesExportCommand is thatch memories export.
type memoriesExportCommand struct{ project string }

func (*memoriesExportCommand) Usage() usage {
	return usage{Name: "memories export", Tail: "> FILE.jsonl", Summary: "every live memory as JSON Lines"}
}

func (e *memoriesExportCommand) Flags(fs *flag.FlagSet) { projectFlag(fs, &e.project) }

func (e *memoriesExportCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	nc, err := dialMemories(ctx, c, &e.project)
	if err != nil {
		return err
	}
	defer nc.Close()
	// The export is written to a private temporary file first, and to out only once every
	// page came: a failure half-way (the daemon stopping, a page refused) leaves nothing
	// on out, rather than a truncated export that looks whole.
	tmp, err := os.CreateTemp("", "thatch-export-*.jsonl")
	if err != nil {
		return fmt.Errorf("export: a temporary file for the export: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	w := bufio.NewWriter(tmp)
	after, total := "", 0
	for {
		// cursor asks for a page (cut to fit the broker, nextCursor saying whether
		// more follow); a daemon from before pages reads after and answers an array.
		raw, err := call(ctx, nc, c, protocol.APIMemoryExport, map[string]any{"project": e.project, "after": after, "cursor": after, "limit": exportPage})
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
		return fmt.Errorf("export: write %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(out, tmp); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(os.Stderr, "exported %d %s\n", total, plural(total, "memory", "memories"))
	return nil
}

// memoriesImportCommand is thatch memories import.
type memoriesImportCommand struct{}

func (*memoriesImportCommand) Usage() usage {
	return usage{Name: "memories import", Args: []string{"FILE.jsonl"},
		Summary: "add the memories of an export (- reads standard input); importing twice changes nothing"}
}

func (*memoriesImportCommand) Flags(*flag.FlagSet) {}

func (*memoriesImportCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, args []string) error {
	nc, err := dial(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	return importMemories(ctx, nc, c, args[0], out)
}

// memoriesHygieneCommand is thatch memories hygiene.
type memoriesHygieneCommand struct {
	json    bool
	limit   int
	offset  int
	project string
}

func (*memoriesHygieneCommand) Usage() usage {
	return usage{Name: "memories hygiene", Summary: "duplicate pairs, stale memories and memories of deleted branches, with their texts"}
}

func (h *memoriesHygieneCommand) Flags(fs *flag.FlagSet) {
	jsonFlag(fs, &h.json)
	fs.IntVar(&h.limit, "limit", 100, "at most `N` findings: 1 to 100")
	fs.IntVar(&h.offset, "offset", 0, "skip the first `N` findings (the next page: the offset plus the limit)")
	projectFlag(fs, &h.project)
}

func (h *memoriesHygieneCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, _ []string) error {
	nc, err := dialMemories(ctx, c, &h.project)
	if err != nil {
		return err
	}
	defer nc.Close()
	if h.limit < 1 || h.limit > 100 {
		return fmt.Errorf("--limit must be 1 to 100, got %d (--offset pages through more)", h.limit)
	}
	if h.offset < 0 {
		return fmt.Errorf("--offset must be 0 or more, got %d", h.offset)
	}
	raw, err := call(ctx, nc, c, protocol.APIMemorySignals, map[string]any{"project": h.project, "limit": h.limit, "offset": h.offset})
	if err != nil {
		return err
	}
	var page memory.SignalPage
	if t := strings.TrimSpace(string(raw)); strings.HasPrefix(t, "[") {
		// A daemon from before pages answers the first signals, without a total.
		if h.json {
			return printJSON(out, raw)
		}
		if err := json.Unmarshal(raw, &page.Signals); err != nil {
			return err
		}
		page.Total = len(page.Signals)
	} else {
		if h.json {
			return printJSON(out, raw)
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
	}
	if page.Total == 0 {
		fmt.Fprintln(out, "nothing to tidy: no duplicate pairs, stale memories or memories of deleted branches")
		return nil
	}
	head := fmt.Sprintf("%d %s", page.Total, plural(page.Total, "finding", "findings"))
	if kinds := page.Kinds(); kinds != "" {
		head += ": " + kinds
	}
	fmt.Fprintln(out, head)
	for _, s := range page.Signals {
		fmt.Fprintln(out, s.Kind+":")
		for _, m := range s.Memories {
			fmt.Fprintf(out, "  %s (%s) %s\n", m.ID, m.Kind, oneLine(m.Content, 100))
		}
	}
	switch shown := len(page.Signals); {
	case shown == 0:
		fmt.Fprintf(out, "no findings from %d on: --offset 0 shows the first\n", page.Offset+1)
	case shown < page.Total:
		fmt.Fprintf(out, "shown: %d to %d of %d", page.Offset+1, page.Offset+shown, page.Total)
		if next := page.Offset + shown; next < page.Total {
			fmt.Fprintf(out, "; the next: thatch memories hygiene --offset %d", next)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "\nthe next extraction of each project is asked to resolve them; by hand: thatch memories forget ID, thatch memories dismiss ID OTHER, thatch memories restore ID")
	return nil
}

// memoriesDismissCommand is thatch memories dismiss.
type memoriesDismissCommand struct{}

func (*memoriesDismissCommand) Usage() usage {
	return usage{Name: "memories dismiss", Args: []string{"ID", "OTHER"},
		Summary: "two memories flagged as duplicates say different things: stop pairing them"}
}

func (*memoriesDismissCommand) Flags(*flag.FlagSet) {}

func (*memoriesDismissCommand) Run(ctx context.Context, c daemon.Config, out io.Writer, args []string) error {
	nc, err := dial(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := call(ctx, nc, c, protocol.APIMemoryDismiss, map[string]any{"id": args[0], "distinctFrom": args[1]}); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s and %s are no longer paired (until one of them changes)\n", args[0], args[1])
	return nil
}

// knownShown is how many known projects the error of a --project that names none lists.
const knownShown = 10

// projectName is what --project names, in the daemon's terms: name itself when it names a
// project (a key, a folder or a folder inside one), else the key of the git checkout it is
// a folder of (checkoutKey), else the absolute path of the folder it names here (relative,
// or through a symbolic link), else an error that lists the projects there are. A daemon from before memory.projects gets name as it is.
func projectName(ctx context.Context, nc *conn, c daemon.Config, name string) (string, error) {
	tries := []string{name}
	shown := name
	if abs, ok := folderArg(name); ok {
		// A folder of a git checkout names the project thatch mcp and opencode key by its
		// root commit, whatever folder the memories were written from.
		if key, top, err := checkoutKey(ctx, abs); err == nil && key != abs {
			tries = append(tries, key)
			shown = key + " (the git checkout " + top + ")"
		}
		tries = append(tries, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			tries = append(tries, real)
		}
	}
	seen := map[string]bool{}
	for _, try := range tries {
		if seen[try] {
			continue
		}
		seen[try] = true
		raw, err := call(ctx, nc, c, protocol.APIMemoryProjects, map[string]any{"project": try})
		var herr *protocol.Error
		if errors.As(err, &herr) && herr.Name == protocol.NotFound && strings.Contains(herr.Message, "no API method") {
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
		if filepath.IsAbs(try) && shown == name {
			shown = try
		}
	}
	raw, err := call(ctx, nc, c, protocol.APIMemoryProjects, map[string]any{})
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
func importMemories(ctx context.Context, nc *conn, c daemon.Config, path string, out io.Writer) error {
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
		added, len(ms), plural(len(ms), "memory", "memories"), len(ms)-added)
	return nil
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

// source says where a memory came from: the session that wrote it and its call, or the host
// and client of a write from outside a session (thatch mcp: "mcp, client claude-code").
func source(s memory.Source) string {
	if s.Host != "" && s.SessionID == "" {
		if s.Client != "" {
			return s.Host + ", client " + s.Client
		}
		return s.Host
	}
	if s.CallID == "" {
		return s.SessionID
	}
	// The call is the writing session's own memory tool call (an extraction child's), not
	// one of the calls the extraction read: say whose it is.
	return s.SessionID + ", its call " + s.CallID
}
