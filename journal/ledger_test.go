package journal_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/journal/migrate"
	"github.com/thatch-dev/thatch/runtime"
)

func row(child, project, day string, entries int, in, out int64, usd float64, model string) runtime.LedgerRow {
	at, err := time.Parse(time.DateOnly, day)
	if err != nil {
		panic(err)
	}
	return runtime.LedgerRow{Child: child, Root: "ses_" + child, Project: project, Day: day, At: at.Add(13 * time.Hour), Entries: entries,
		Cost: runtime.Cost{TokensIn: in, TokensOut: out, USD: usd, Model: model, Turns: 1}}
}

// inDir is r with the folder of its root session.
func inDir(dir string, r runtime.LedgerRow) runtime.LedgerRow {
	r.Directory = dir
	return r
}

func commitLedger(t *testing.T, s *journal.Store, rows ...runtime.LedgerRow) {
	t.Helper()
	fx := runtime.NewEffects()
	fx.Ledger = rows
	if err := s.Commit(&runtime.Batch{Now: time.Now(), State: runtime.NewState(), Effects: fx}); err != nil {
		t.Fatal(err)
	}
}

func costs(t *testing.T, s *journal.Store, since string) []runtime.CostRow {
	t.Helper()
	rows, err := s.Costs(since)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		slices.Sort(rows[i].Models) // group_concat's order is SQLite's
	}
	return rows
}

func sameCost(a, b runtime.CostRow) bool {
	return a.Day == b.Day && a.Project == b.Project && a.Directory == b.Directory && a.Extractions == b.Extractions && a.Entries == b.Entries &&
		a.Tokens == b.Tokens && a.TokensIn == b.TokensIn && a.TokensOut == b.TokensOut &&
		math.Abs(a.USD-b.USD) < 1e-12 && slices.Equal(a.Models, b.Models)
}

func checkCosts(t *testing.T, got, want []runtime.CostRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("costs: %d rows, want %d:\n got %+v\nwant %+v", len(got), len(want), got, want)
	}
	for i := range want {
		if !sameCost(got[i], want[i]) {
			t.Errorf("costs row %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// TestLedgerCosts: ledger rows committed in batches come back from Costs as one row per UTC
// day and project, newest day first, with their extractions, entries, tokens and cost
// summed, their distinct models listed and one of their folders named (none when no row
// has one); since bounds the days; a second row for a child already in the ledger counts
// for nothing.
func TestLedgerCosts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "thatch.db")
	s, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	commitLedger(t, s,
		inDir("/home/u/a", row("c1", "/p/a", "2026-03-02", 3, 1000, 200, 0.01, "anthropic/claude-haiku-4-5")),
		row("c2", "/p/a", "2026-03-02", 2, 500, 100, 0.005, "openai/gpt-5-mini"), // journaled before the folder was kept
		row("c3", "/p/b", "2026-03-02", 1, 10, 5, 0, "anthropic/claude-haiku-4-5"),
	)
	commitLedger(t, s,
		inDir("/home/u/a", row("c4", "/p/a", "2026-03-01", 4, 7, 3, 0.001, "anthropic/claude-haiku-4-5")),
		row("c5", "/p/a", "2026-02-27", 1, 70, 30, 0.002, ""),
		// The same child again, with other figures: the first row stands.
		row("c1", "/p/a", "2026-03-02", 99, 99999, 99999, 9.99, "other/model"),
	)
	// Within one batch too.
	commitLedger(t, s, row("c6", "/p/b", "2026-03-01", 1, 1, 1, 0, "x/y"), row("c6", "/p/b", "2026-03-01", 1, 1, 1, 0, "x/y"))

	a2 := runtime.CostRow{Day: "2026-03-02", Project: "/p/a", Directory: "/home/u/a", Extractions: 2, Entries: 5, Tokens: 1800, TokensIn: 1500, TokensOut: 300, USD: 0.015,
		Models: []string{"anthropic/claude-haiku-4-5", "openai/gpt-5-mini"}}
	b2 := runtime.CostRow{Day: "2026-03-02", Project: "/p/b", Extractions: 1, Entries: 1, Tokens: 15, TokensIn: 10, TokensOut: 5,
		Models: []string{"anthropic/claude-haiku-4-5"}}
	a1 := runtime.CostRow{Day: "2026-03-01", Project: "/p/a", Directory: "/home/u/a", Extractions: 1, Entries: 4, Tokens: 10, TokensIn: 7, TokensOut: 3, USD: 0.001,
		Models: []string{"anthropic/claude-haiku-4-5"}}
	b1 := runtime.CostRow{Day: "2026-03-01", Project: "/p/b", Extractions: 1, Entries: 1, Tokens: 2, TokensIn: 1, TokensOut: 1, Models: []string{"x/y"}}
	// A row whose model is unknown ("") lists none, not [""].
	a0 := runtime.CostRow{Day: "2026-02-27", Project: "/p/a", Extractions: 1, Entries: 1, Tokens: 100, TokensIn: 70, TokensOut: 30, USD: 0.002}

	checkCosts(t, costs(t, s, "2026-03-01"), []runtime.CostRow{a2, b2, a1, b1})
	checkCosts(t, costs(t, s, "2026-03-02"), []runtime.CostRow{a2, b2})
	all := costs(t, s, "2000-01-01")
	if len(all) != 5 || all[4].Day != "2026-02-27" {
		t.Fatalf("costs since 2000: %+v", all)
	}
	checkCosts(t, all[4:], []runtime.CostRow{a0})

	none := costs(t, s, "2026-03-03")
	if none == nil || len(none) != 0 {
		t.Errorf("costs of days without extraction: %#v, want an empty list (JSON [], not null)", none)
	}
	data, _ := json.Marshal(none)
	if string(data) != "[]" {
		t.Errorf("costs of days without extraction encode as %s, want []", data)
	}

	// The rows outlive a reopen.
	s.Close()
	s, err = journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkCosts(t, costs(t, s, "2026-03-01"), []runtime.CostRow{a2, b2, a1, b1})
}

// TestLedgerCostsUnknownModel: an extraction whose model is unknown (a host that reports
// none, no THATCH_EXTRACT_MODEL, no smallModel) adds no "" to a day's models, also when the
// same day and project had extractions on a known model.
func TestLedgerCostsUnknownModel(t *testing.T) {
	s := open(t)
	commitLedger(t, s, row("m1", "/p/m", "2026-01-05", 1, 1, 1, 0, ""), row("m2", "/p/m", "2026-01-05", 1, 1, 1, 0, "x/y"),
		row("m3", "/p/n", "2026-01-05", 1, 1, 1, 0, ""))
	checkCosts(t, costs(t, s, "2026-01-05"), []runtime.CostRow{
		{Day: "2026-01-05", Project: "/p/m", Extractions: 2, Entries: 2, Tokens: 4, TokensIn: 2, TokensOut: 2, Models: []string{"x/y"}},
		{Day: "2026-01-05", Project: "/p/n", Extractions: 1, Entries: 1, Tokens: 2, TokensIn: 1, TokensOut: 1},
	})
}

// TestLedgerFromStep: the ledger row and today's tokens the runtime derives from an ended
// extraction child's messages are committed together, and a reload brings the day's
// spending (Counters.Day, DayTokens) back, so the daily budget survives a restart.
func TestLedgerFromStep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "thatch.db")
	s, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 2, 23, 30, 0, 0, time.FixedZone("UTC-5", -5*3600)) // 2026-03-03 in UTC
	rules := runtime.DefaultRules
	rules.DailyTokens = 2000
	st := runtime.NewState()
	cost := 0.0042
	msgs := func(in, out, read int64) []runtime.Message {
		tok := &runtime.Tokens{Input: in, Output: out}
		tok.Cache.Read = read
		return []runtime.Message{
			{Info: runtime.MessageInfo{ID: "m1", Role: "user"}},
			{Info: runtime.MessageInfo{ID: "m2", Role: "assistant", ProviderID: "anthropic", ModelID: "claude-haiku-4-5", Tokens: tok, Cost: &cost}},
		}
	}
	ended := func(child string, m []runtime.Message) runtime.Result {
		return runtime.Result{Call: runtime.Call{Host: "h1", Op: runtime.OpMessages, Purpose: runtime.PurposeLedger, SessionID: child,
			Ledger: &runtime.LedgerRef{Root: "ses_a", Project: "4b0ea68d", Directory: "/p/a", Entries: 2}}, Messages: m}
	}
	for i, child := range []string{"ses_c1", "ses_c2"} {
		fx := rules.Step(st, ended(child, msgs(1200, 300, 100)), now.Add(time.Duration(i)*time.Minute))
		if len(fx.Ledger) != 1 || !fx.Counters {
			t.Fatalf("step of %s's messages: ledger %+v, counters %v", child, fx.Ledger, fx.Counters)
		}
		if err := s.Commit(&runtime.Batch{Now: now, State: st, Effects: fx}); err != nil {
			t.Fatal(err)
		}
	}
	if st.Counters.Day != "2026-03-03" || st.Counters.DayTokens != 3200 {
		t.Fatalf("in memory: day %q, tokens %d; want 2026-03-03, 3200", st.Counters.Day, st.Counters.DayTokens)
	}
	s.Close()

	s, err = journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got.Counters.Day != "2026-03-03" || got.Counters.DayTokens != 3200 {
		t.Errorf("reloaded: day %q, tokens %d; want 2026-03-03, 3200", got.Counters.Day, got.Counters.DayTokens)
	}
	if !got.BudgetReached(rules.DailyTokens, now) || got.BudgetReached(rules.DailyTokens, now.Add(24*time.Hour)) {
		t.Errorf("reloaded budget: reached today %v, tomorrow %v; want true, false",
			got.BudgetReached(rules.DailyTokens, now), got.BudgetReached(rules.DailyTokens, now.Add(24*time.Hour)))
	}
	checkCosts(t, costs(t, s, "2026-03-03"), []runtime.CostRow{{Day: "2026-03-03", Project: "4b0ea68d", Directory: "/p/a", Extractions: 2, Entries: 4,
		Tokens: 3200, TokensIn: 2600, TokensOut: 600, USD: 0.0084, Models: []string{"anthropic/claude-haiku-4-5"}}})
}

// TestEntrySizeAndTrivialReload: an entry's payload size and its trivial mark, journaled
// with it, come back on Load, also after the entry moved to another root.
func TestEntrySizeAndTrivialReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "thatch.db")
	s, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st := runtime.NewState()
	for _, id := range []string{"ses_a", "ses_b"} {
		st.Sessions[id] = &runtime.Session{ID: id, HostID: "h1", Kind: runtime.KindTop, Directory: "/p/a"}
	}
	fx := runtime.NewEffects()
	fx.Sessions["ses_a"], fx.Sessions["ses_b"] = true, true
	at := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	for _, e := range []struct {
		id      string
		size    int
		trivial bool
	}{{"c1", 321, false}, {"c2", 48, true}, {"c3", 24000, false}} {
		fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: "ses_a", ID: e.id, At: at, Size: e.size, Trivial: e.trivial,
			Body: &runtime.Body{Tool: "bash", Output: "out " + e.id}})
	}
	if err := s.Commit(&runtime.Batch{Now: at, State: st, Effects: fx}); err != nil {
		t.Fatal(err)
	}
	fx = runtime.NewEffects()
	fx.Entries = []runtime.EntryOp{{Kind: runtime.EntryMove, Root: "ses_b", From: "ses_a", ID: "c2"}}
	if err := s.Commit(&runtime.Batch{Now: at, State: st, Effects: fx}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]runtime.Entry{
		"ses_a": {runtime.NewEntry("c1", "bash", 321, false), runtime.NewEntry("c3", "bash", 24000, false)},
		"ses_b": {runtime.NewEntry("c2", "bash", 48, true)},
	}
	for id, w := range want {
		if sess := got.Sessions[id]; sess == nil || !slices.Equal(sess.Entries, w) {
			t.Errorf("%s reloaded with entries %+v, want %+v", id, sess, w)
		}
	}
}

// oldJournal creates a journal file of the schema of migrations 1 to version (at most 9) and
// returns a connection to it for the test to fill, and upgrade, which closes it and opens the
// file as this thatch does (migrating it), for the rest of the test.
func oldJournal(t *testing.T, version int) (db *sql.DB, upgrade func() *journal.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "thatch.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrate.Apply(db, os.DirFS("."), fmt.Sprintf("migrations/00[1-%d]_*.sql", version), "journal"); err != nil {
		t.Fatal(err)
	}
	return db, func() *journal.Store {
		t.Helper()
		db.Close()
		s, err := journal.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// TestMigrationSizesOldEntries: a journal of the schema before issue 14 (migrations 001 to
// 004) opened by this thatch gains the ledger, and its entries get a size from their body
// (at most 1000) and are not trivial.
func TestMigrationSizesOldEntries(t *testing.T) {
	db, upgrade := oldJournal(t, 4)
	var version int
	if err := db.QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&version); err != nil || version != 4 {
		t.Fatalf("old journal at version %d (%v), want 4", version, err)
	}
	sess, _ := json.Marshal(&runtime.Session{ID: "ses_a", HostID: "h1", Kind: runtime.KindTop, Directory: "/p/a"})
	if _, err := db.Exec(`INSERT INTO sessions (session_id, host_id, directory, touched_at, data) VALUES ('ses_a', 'h1', '/p/a', 1, ?)`, string(sess)); err != nil {
		t.Fatal(err)
	}
	short, _ := json.Marshal(runtime.Body{Tool: "bash", Output: "ok"})
	long, _ := json.Marshal(runtime.Body{Tool: "bash", Output: strings.Repeat("y", 5000)})
	for i, body := range [][]byte{short, long} {
		if _, err := db.Exec(`INSERT INTO entries (root_id, entry_id, tool, created_at, body) VALUES ('ses_a', ?, 'bash', 1, ?)`,
			[]string{"c1", "c2"}[i], body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`SELECT size FROM entries`); err == nil {
		t.Fatal("the old schema already has entries.size: the test does not build a version-4 journal")
	}
	s := upgrade()
	all, _ := filepath.Glob("migrations/*.sql")
	if err := s.DB().QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&version); err != nil || version != len(all) {
		t.Fatalf("migrated journal at version %d (%v), want %d, the last migration", version, err, len(all))
	}
	got, _, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := []runtime.Entry{runtime.NewEntry("c1", "bash", int32(len(short)), false), runtime.NewEntry("c2", "bash", 1000, false)}
	if sess := got.Sessions["ses_a"]; sess == nil || !slices.Equal(sess.Entries, want) {
		t.Errorf("old entries after migration: %+v, want %+v", sess, want)
	}
	if rows := costs(t, s, "2000-01-01"); len(rows) != 0 {
		t.Errorf("a migrated journal's ledger holds %+v", rows)
	}
	commitLedger(t, s, row("c9", "/p/a", "2026-03-02", 1, 1, 1, 0, "x/y"))
	if rows := costs(t, s, "2000-01-01"); len(rows) != 1 {
		t.Errorf("the migrated ledger after one row: %+v", rows)
	}
}

// TestMigrationLedgerDirectory: a journal from before the ledger kept folders (version 5)
// keeps its ledger rows, which name only their project key; a new row of the same day and
// project names the folder for them all.
func TestMigrationLedgerDirectory(t *testing.T) {
	db, upgrade := oldJournal(t, 5)
	if _, err := db.Exec(`INSERT INTO ledger (child_id, root_id, project, day, at, entries, tokens_in, tokens_out, cost, model, turns)
		VALUES ('c1', 'ses_a', '4b0ea68d', '2026-03-02', 1, 2, 100, 20, 0.001, 'x/y', 1)`); err != nil {
		t.Fatal(err)
	}
	s := upgrade()
	old := runtime.CostRow{Day: "2026-03-02", Project: "4b0ea68d", Extractions: 1, Entries: 2, Tokens: 120, TokensIn: 100, TokensOut: 20,
		USD: 0.001, Models: []string{"x/y"}}
	checkCosts(t, costs(t, s, "2026-03-02"), []runtime.CostRow{old})
	commitLedger(t, s, inDir("/home/u/a", row("c2", "4b0ea68d", "2026-03-02", 1, 10, 2, 0, "x/y")))
	old.Directory, old.Extractions, old.Entries, old.Tokens, old.TokensIn, old.TokensOut = "/home/u/a", 2, 3, 132, 110, 22
	checkCosts(t, costs(t, s, "2026-03-02"), []runtime.CostRow{old})
}
