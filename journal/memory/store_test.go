package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/thatch-dev/thatch/internal/testkit"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// setup opens a fresh store in t's temporary folder.
func setup(t testing.TB, opts ...Options) *Store {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	return openAt(t, filepath.Join(t.TempDir(), "data", "memories.db"), o)
}

// openAt opens the store at path, closed when t ends.
func openAt(t testing.TB, path string, o Options) *Store {
	t.Helper()
	s, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// remember is Remember that must succeed.
func remember(t testing.TB, s *Store, c Caller, content string, a ...RememberArgs) Remembered {
	t.Helper()
	var args RememberArgs
	if len(a) > 0 {
		args = a[0]
	}
	args.Content = content
	r, err := s.Remember(context.Background(), c, args, t0)
	if err != nil {
		t.Fatalf("remember %q: %v", content, err)
	}
	return r
}

// found is the ids Search finds for query in c's project.
func found(t *testing.T, s *Store, c Caller, query string) []string {
	t.Helper()
	r, err := s.Search(context.Background(), Caller{Project: c.Project}, query, nil, 50, t0)
	if err != nil {
		t.Fatalf("search %q: %v", query, err)
	}
	ids := []string{}
	for _, h := range r.Hits {
		ids = append(ids, h.Memory.ID)
	}
	return ids
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

var alice = Caller{Project: "github.com/acme/api", SessionID: "ses_a"}

func TestOpenMakesPrivateFile(t *testing.T) {
	s := setup(t)
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}
	di, _ := os.Stat(filepath.Dir(s.Path()))
	if di.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %v, want 0700", di.Mode().Perm())
	}
	var mode string
	if err := s.w.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode %q (%v), want wal", mode, err)
	}
	if _, err := s.r.Exec(`DELETE FROM calls`); err == nil {
		t.Error("the reader pool accepted a write")
	}
}

func TestOpenReopens(t *testing.T) {
	s := setup(t)
	r := remember(t, s, alice, "The staging database is pg-staging-3")
	s.Close()
	s2, err := Open(s.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	m, _, err := s2.Get(context.Background(), r.Memory.ID)
	if err != nil || m.Content != r.Memory.Content {
		t.Fatalf("after reopening: %+v, %v", m, err)
	}
}

func TestOpenDamagedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memories.db")
	junk := []byte(strings.Repeat("this is not a database at all ", 200))
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{})
	if err == nil {
		t.Fatal("opened a damaged file")
	}
	for _, want := range []string{path, "move it aside and start thatch again", "the old file is kept"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if data, _ := os.ReadFile(path); string(data) != string(junk) {
		t.Error("the damaged file was changed")
	}
}

func TestRememberCreates(t *testing.T) {
	s := setup(t)
	c := Caller{Project: alice.Project, SessionID: "ses_a", CallID: "call_1"}
	r, err := s.Remember(context.Background(), c, RememberArgs{
		Content: "  Run `make check` before pushing; CI rejects unformatted code.\n",
		Kind:    "command", Branch: "main", Tags: []string{" ci ", "make"},
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Memory
	if !r.Created || r.Repeat || len(r.Similar) != 0 {
		t.Errorf("created %v repeat %v similar %v", r.Created, r.Repeat, r.Similar)
	}
	if !regexp.MustCompile(`^mem_[0-9a-f]{20}$`).MatchString(m.ID) || !strings.HasPrefix(m.ID, fmt.Sprintf("mem_%012x", t0.UnixMilli())) {
		t.Errorf("id %q", m.ID)
	}
	want := Memory{
		ID: m.ID, Project: alice.Project, Branch: "main", Kind: "command",
		Content: "Run `make check` before pushing; CI rejects unformatted code.", Tags: []string{"ci", "make"},
		CreatedAt: t0, UpdatedAt: t0, Source: Source{SessionID: "ses_a", CallID: "call_1"},
	}
	if !equal(m, want) {
		t.Errorf("remembered\n%+v, want\n%+v", m, want)
	}
	got, log, err := s.Get(context.Background(), m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !equal(got, want) {
		t.Errorf("stored\n%+v, want\n%+v", got, want)
	}
	if len(log) != 1 || log[0].Op != "create" || !log[0].At.Equal(t0) || log[0].SessionID != "ses_a" || log[0].CallID != "call_1" {
		t.Errorf("audit %+v", log)
	}
	if n, _ := s.Count(context.Background()); n != 1 {
		t.Errorf("count %d", n)
	}
}

func TestMemoryJSON(t *testing.T) {
	s := setup(t)
	r := remember(t, s, alice, "no tags here")
	data, _ := json.Marshal(r)
	for _, want := range []string{`"tags":[]`, `"createdAt":"2025-03-01T12:00:00Z"`, `"similar":[]`, `"created":true`, `"source":{"sessionID":"ses_a"}`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %s", data, want)
		}
	}
	if strings.Contains(string(data), "usedAt") || strings.Contains(string(data), "forgottenAt") || strings.Contains(string(data), "Repeat") {
		t.Errorf("%s shows unset fields", data)
	}
}

// equal compares memories field by field (times with Equal).
func equal(a, b Memory) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func TestRememberExactDuplicate(t *testing.T) {
	s := setup(t)
	first := remember(t, s, alice, "Use pnpm, not npm, for installs")
	again := remember(t, s, Caller{Project: alice.Project, SessionID: "ses_b"}, "  use PNPM,\tnot   npm,\nfor INSTALLS ")
	if again.Created || again.Memory.ID != first.Memory.ID || again.Memory.Content != first.Memory.Content {
		t.Errorf("duplicate answered %+v, want the first memory with Created false", again)
	}
	if len(again.Similar) != 0 {
		t.Errorf("similar lists the memory itself: %v", again.Similar)
	}
	if _, log, _ := s.Get(context.Background(), first.Memory.ID); len(log) != 1 {
		t.Errorf("audit %+v, want only the create", log)
	}
	if n, _ := s.Count(context.Background()); n != 1 {
		t.Errorf("count %d, want 1", n)
	}
	// The same text in another project is another memory.
	other := remember(t, s, Caller{Project: "other"}, "Use pnpm, not npm, for installs")
	if !other.Created || other.Memory.ID == first.Memory.ID {
		t.Errorf("other project: %+v", other)
	}
	// A forgotten memory does not block remembering its text again.
	if _, err := s.Forget(context.Background(), alice, first.Memory.ID, "", t0); err != nil {
		t.Fatal(err)
	}
	if r := remember(t, s, alice, "use pnpm, not npm, for installs"); !r.Created {
		t.Error("text of a forgotten memory was not remembered again")
	}
}

func TestRememberSimilar(t *testing.T) {
	s := setup(t)
	base := remember(t, s, alice, "deploy service through blue green switch after smoke tests cleanly")
	remember(t, s, alice, "unrelated note about coffee machine descaling schedule")
	remember(t, s, alice, "deploy frontend bundle via cdn purge")
	remember(t, s, Caller{Project: "elsewhere"}, "deploy service through blue green switch after smoke tests quickly")
	r := remember(t, s, alice, "deploy service through blue green switch after smoke tests quickly")
	if !r.Created {
		t.Fatal("a one-word change was taken for a duplicate")
	}
	if len(r.Similar) != 1 || r.Similar[0].ID != base.Memory.ID || r.Similar[0].Score != 0.9 {
		t.Errorf("similar %+v, want only %s at 0.9", r.Similar, base.Memory.ID)
	}
	// Nothing alike: an empty list.
	if r := remember(t, s, alice, "coffee beans come from the third floor kitchen"); len(r.Similar) != 0 {
		t.Errorf("similar %+v, want none", r.Similar)
	}
}

func TestRememberSimilarAtMostFive(t *testing.T) {
	s := setup(t)
	words := "alpha bravo charlie delta echo foxtrot golf hotel india juliet"
	for i := range 8 {
		remember(t, s, alice, words+fmt.Sprintf(" extra%d", i))
	}
	r := remember(t, s, alice, words)
	if len(r.Similar) != 5 {
		t.Fatalf("similar %+v, want 5", r.Similar)
	}
	for i := 1; i < len(r.Similar); i++ {
		if r.Similar[i].Score > r.Similar[i-1].Score || r.Similar[i].ID == r.Memory.ID {
			t.Errorf("similar %+v not best first, or lists itself", r.Similar)
		}
	}
}

func TestSimilarity(t *testing.T) {
	ten := "alpha bravo charlie delta echo foxtrot golf hotel india juliet"
	tests := []struct {
		a, b string
		want float64
	}{
		{ten, ten, 1},
		{ten, "alpha bravo charlie delta echo foxtrot golf hotel india kilo", 0.9},
		{ten, "alpha bravo charlie delta echo foxtrot golf hotel lima kilo", 0.8},
		{ten, "ALPHA, bravo; Charlie delta — echo foxtrot golf hotel india juliet!", 1},
		{ten, "the alpha bravo charlie delta echo foxtrot golf hotel india juliet of it", 1}, // stopwords dropped
		{"use pnpm", "pnpm use", 1},
		{"x y", "x y z w", 2 * 2.0 / 6},
		{"a b", "a b c d", 2 * 1.0 / 4}, // a is a stopword
		{"x x y", "x y y", 2 * 2.0 / 6}, // multisets: one x and one y in common
		{"it is", "it is", 1},           // only stopwords: they count
		{"", ten, 0},
		{"!!!", "???", 0},
		{"café crème", "café crème", 1},
		{ten, "mike november oscar papa quebec", 0},
	}
	for _, tt := range tests {
		if got := Similarity(tt.a, tt.b); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("Similarity(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got, back := Similarity(tt.a, tt.b), Similarity(tt.b, tt.a); got != back {
			t.Errorf("Similarity is not symmetric for %q, %q", tt.a, tt.b)
		}
	}
	if Similarity(ten, "alpha bravo charlie delta echo foxtrot golf hotel india kilo") < DuplicateThreshold {
		t.Error("a one-word change of ten is below DuplicateThreshold")
	}
}

func TestUpdate(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	m := remember(t, s, alice, "The gateway listens on port 8080").Memory
	other := remember(t, s, alice, "Logs go to /var/log/api").Memory
	content, kind, tags := "The gateway listens on port 9443 since the TLS switch", "decision", []string{"gateway"}
	later := t0.Add(time.Hour)
	u, err := s.Update(ctx, Caller{Project: alice.Project, SessionID: "ses_u"}, m.ID, UpdateArgs{Content: &content, Kind: &kind, Tags: &tags}, later)
	if err != nil {
		t.Fatal(err)
	}
	if u.Memory.Content != content || u.Memory.Kind != "decision" || len(u.Memory.Tags) != 1 || !u.Memory.UpdatedAt.Equal(later) || !u.Memory.CreatedAt.Equal(t0) {
		t.Errorf("updated %+v", u.Memory)
	}
	if ids := found(t, s, alice, "8080"); len(ids) != 0 {
		t.Errorf("the old text is still found: %v", ids)
	}
	if ids := found(t, s, alice, "9443"); len(ids) != 1 || ids[0] != m.ID {
		t.Errorf("the new text is not found: %v", ids)
	}
	if ids := found(t, s, alice, "gateway"); len(ids) != 1 {
		t.Errorf("tag or content search: %v", ids)
	}
	got, log, err := s.Get(ctx, m.ID)
	if err != nil || got.Content != content {
		t.Fatalf("get %+v %v", got, err)
	}
	if len(log) != 2 || log[1].Op != "update" || log[1].Before != "The gateway listens on port 8080" || log[1].SessionID != "ses_u" || !log[1].At.Equal(later) {
		t.Errorf("audit %+v", log)
	}

	// Only the tags: content and kind stay.
	tags2 := []string{"net", "tls"}
	u, err = s.Update(ctx, alice, m.ID, UpdateArgs{Tags: &tags2}, later)
	if err != nil || u.Memory.Content != content || u.Memory.Kind != "decision" || strings.Join(u.Memory.Tags, ",") != "net,tls" {
		t.Errorf("tags only: %+v %v", u.Memory, err)
	}
	if ids := found(t, s, alice, "tls"); !contains(ids, m.ID) {
		t.Error("new tag not found")
	}

	// Content of another live memory: refused, naming it.
	dup := "logs go to  /VAR/log/api"
	_, err = s.Update(ctx, alice, m.ID, UpdateArgs{Content: &dup}, later)
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), other.ID) || !strings.Contains(err.Error(), "forget one of them") {
		t.Errorf("update to another memory's content: %v", err)
	}
	// Its own content again (another case) is fine.
	same := strings.ToUpper(content)
	if _, err := s.Update(ctx, alice, m.ID, UpdateArgs{Content: &same}, later); err != nil {
		t.Errorf("update to its own content: %v", err)
	}
}

func TestForget(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	m := remember(t, s, alice, "Flaky test: TestUpload times out on CI", RememberArgs{Kind: "pitfall"}).Memory
	keep := remember(t, s, alice, "Upload limits are 10 MB").Memory
	later := t0.Add(2 * time.Hour)
	f, err := s.Forget(ctx, Caller{Project: alice.Project, SessionID: "ses_f", CallID: "c9"}, m.ID, "fixed in #42", later)
	if err != nil {
		t.Fatal(err)
	}
	if f.Memory.ForgottenAt == nil || !f.Memory.ForgottenAt.Equal(later) {
		t.Errorf("forgotten %+v", f.Memory)
	}
	if ids := found(t, s, alice, "upload"); len(ids) != 1 || ids[0] != keep.ID {
		t.Errorf("search after forget: %v", ids)
	}
	list, _ := s.List(ctx, ListQuery{Projects: one(alice.Project)})
	if len(list) != 1 || list[0].ID != keep.ID {
		t.Errorf("list after forget: %+v", list)
	}
	if list, _ := s.List(ctx, ListQuery{Query: "TestUpload"}); len(list) != 0 {
		t.Errorf("list query after forget: %+v", list)
	}
	if sec, _ := s.Section(ctx, alice.Project, 2000, later); strings.Contains(sec, m.ID) || !strings.Contains(sec, keep.ID) {
		t.Errorf("section after forget: %q", sec)
	}
	got, log, err := s.Get(ctx, m.ID)
	if err != nil || got.ForgottenAt == nil || !got.ForgottenAt.Equal(later) {
		t.Fatalf("get forgotten: %+v %v", got, err)
	}
	if len(log) != 2 || log[1].Op != "forget" || log[1].Reason != "fixed in #42" || log[1].Before != m.Content || log[1].CallID != "c9" {
		t.Errorf("audit %+v", log)
	}
	if _, err := s.Forget(ctx, alice, m.ID, "", later); !errors.Is(err, ErrNotFound) {
		t.Errorf("forget twice: %v", err)
	}
	if _, err := s.Update(ctx, alice, m.ID, UpdateArgs{Kind: ptr("fact")}, later); !errors.Is(err, ErrNotFound) {
		t.Errorf("update forgotten: %v", err)
	}
	if n, _ := s.Count(ctx); n != 1 {
		t.Errorf("count %d", n)
	}
	// A person (no project) forgets any project's memory.
	if _, err := s.Forget(ctx, Caller{}, keep.ID, "by hand", later); err != nil {
		t.Errorf("person forgets: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestProjectIsolation(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	bob := Caller{Project: "/home/bob/shop", SessionID: "ses_b"}
	theirs := remember(t, s, bob, "The shop's admin password rotates monthly").Memory
	mine := remember(t, s, alice, "The api's admin token rotates weekly").Memory

	if _, err := s.Update(ctx, alice, theirs.ID, UpdateArgs{Content: ptr("mine now")}, t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of another project's memory: %v", err)
	}
	if _, err := s.Forget(ctx, alice, theirs.ID, "", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("forget of another project's memory: %v", err)
	}
	if ids := found(t, s, alice, "admin rotates"); len(ids) != 1 || ids[0] != mine.ID {
		t.Errorf("alice finds %v", ids)
	}
	if ids := found(t, s, bob, "admin rotates"); len(ids) != 1 || ids[0] != theirs.ID {
		t.Errorf("bob finds %v", ids)
	}
	if r, _ := s.Related(ctx, alice.Project, "shop admin password monthly", 10); len(r) != 1 || r[0].ID != mine.ID {
		t.Errorf("related across projects: %+v", r)
	}
	if sec, _ := s.Section(ctx, alice.Project, 2000, t0); strings.Contains(sec, theirs.ID) {
		t.Errorf("section shows another project: %q", sec)
	}
	// Without a project, lists and searches span every project.
	if all, _ := s.List(ctx, ListQuery{}); len(all) != 2 {
		t.Errorf("list of all: %+v", all)
	}
	if all, _ := s.List(ctx, ListQuery{Query: "admin"}); len(all) != 2 {
		t.Errorf("list query of all: %+v", all)
	}
	if ids := found(t, s, Caller{}, "admin"); len(ids) != 2 {
		t.Errorf("search of all: %v", ids)
	}
	// The memory of the other project is untouched.
	if got, _, _ := s.Get(ctx, theirs.ID); got.ForgottenAt != nil || got.Content != theirs.Content {
		t.Errorf("other project's memory changed: %+v", got)
	}
}

func TestCallIDRepeat(t *testing.T) {
	ctx := context.Background()
	later := t0.Add(time.Hour)
	c := Caller{Project: alice.Project, SessionID: "ses_r", CallID: "call_7"}

	t.Run("remember", func(t *testing.T) {
		s := setup(t)
		first, err := s.Remember(ctx, c, RememberArgs{Content: "first text"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.Remember(ctx, c, RememberArgs{Content: "another text entirely"}, later)
		if err != nil || !again.Repeat || !again.Created || again.Memory.ID != first.Memory.ID || again.Memory.Content != "first text" {
			t.Errorf("repeat %+v %v", again, err)
		}
		if n, _ := s.Count(ctx); n != 1 {
			t.Errorf("count %d", n)
		}
		// The same callID in another session is another call.
		if r, _ := s.Remember(ctx, Caller{Project: c.Project, SessionID: "ses_other", CallID: c.CallID}, RememberArgs{Content: "third"}, t0); r.Repeat {
			t.Error("callID of another session repeated")
		}
	})
	t.Run("update", func(t *testing.T) {
		s := setup(t)
		m := remember(t, s, alice, "v1").Memory
		first, err := s.Update(ctx, c, m.ID, UpdateArgs{Content: ptr("v2")}, t0)
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.Update(ctx, c, m.ID, UpdateArgs{Content: ptr("v3")}, later)
		if err != nil || !again.Repeat || again.Memory.Content != "v2" || !again.Memory.UpdatedAt.Equal(first.Memory.UpdatedAt) {
			t.Errorf("repeat %+v %v", again, err)
		}
		got, log, _ := s.Get(ctx, m.ID)
		if got.Content != "v2" || len(log) != 2 {
			t.Errorf("store changed by the repeat: %+v %+v", got, log)
		}
	})
	t.Run("forget", func(t *testing.T) {
		s := setup(t)
		m := remember(t, s, alice, "to forget").Memory
		if _, err := s.Forget(ctx, c, m.ID, "why", t0); err != nil {
			t.Fatal(err)
		}
		again, err := s.Forget(ctx, c, m.ID, "why", later)
		if err != nil || !again.Repeat || again.Memory.ID != m.ID || !again.Memory.ForgottenAt.Equal(t0) {
			t.Errorf("repeat %+v %v", again, err)
		}
		if _, log, _ := s.Get(ctx, m.ID); len(log) != 2 {
			t.Errorf("audit %+v", log)
		}
	})
	t.Run("search", func(t *testing.T) {
		s := setup(t)
		m := remember(t, s, alice, "the build cache lives in /tmp/cache").Memory
		first, err := s.Search(ctx, c, "cache", nil, 0, t0)
		if err != nil || len(first.Hits) != 1 {
			t.Fatalf("search %+v %v", first, err)
		}
		remember(t, s, alice, "cache keys include the go version")
		// The repeat finds the first answer queued for the writer, then kept in the table;
		// either way it marks nothing.
		for _, when := range []string{"queued", "kept"} {
			if when == "kept" {
				flushUsed(t, s)
			}
			again, err := s.Search(ctx, c, "cache", nil, 0, later)
			if err != nil || len(again.Hits) != 1 || again.Hits[0].Memory.ID != m.ID || again.Hits[0].Score != first.Hits[0].Score {
				t.Errorf("repeat (%s) %+v %v, want the first answer", when, again, err)
			}
		}
		if got, _, _ := s.Get(ctx, m.ID); got.UsedAt == nil || !got.UsedAt.Equal(t0) {
			t.Errorf("used at %v, want %v (the repeat marks nothing)", got.UsedAt, t0)
		}
		// Another session's call with the same callID is its own.
		other := c
		other.SessionID = "another"
		if fresh, err := s.Search(ctx, other, "cache", nil, 0, later); err != nil || len(fresh.Hits) != 2 {
			t.Errorf("another session's search %+v %v, want both memories", fresh, err)
		}
	})
	t.Run("search then another tool", func(t *testing.T) {
		s := setup(t)
		remember(t, s, alice, "the build cache lives in /tmp/cache")
		if _, err := s.Search(ctx, c, "cache", nil, 0, t0); err != nil {
			t.Fatal(err)
		}
		flushUsed(t, s)
		if _, err := s.Remember(ctx, c, RememberArgs{Content: "x"}, t0); !errors.Is(err, ErrBadRequest) {
			t.Errorf("callID of a search reused for remember: %v", err)
		}
		rc := Caller{Project: c.Project, SessionID: c.SessionID, CallID: "call-r"}
		remember(t, s, rc, "y")
		if _, err := s.Search(ctx, rc, "cache", nil, 0, t0); !errors.Is(err, ErrBadRequest) {
			t.Errorf("callID of a remember reused for search: %v", err)
		}
	})
	t.Run("queued search then a write", func(t *testing.T) {
		s := setup(t)
		m := remember(t, s, alice, "the build cache lives in /tmp/cache").Memory
		// The search's answer stays queued: the writer is held while it searches, and the
		// test takes the signal that would have the writer keep it.
		release := holdWriter(t, s)
		first, err := s.Search(ctx, c, "cache", nil, 0, t0)
		if err != nil || len(first.Hits) != 1 {
			t.Fatalf("search %+v %v", first, err)
		}
		<-s.marks.kick
		release()
		writes := map[string]func() error{
			"remember": func() error { _, err := s.Remember(ctx, c, RememberArgs{Content: "x"}, t0); return err },
			"update": func() error {
				content := "the build cache lives in /var/cache"
				_, err := s.Update(ctx, c, m.ID, UpdateArgs{Content: &content}, t0)
				return err
			},
			"forget": func() error { _, err := s.Forget(ctx, c, m.ID, "", t0); return err },
		}
		for name, write := range writes {
			if err := write(); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "already used for memory_search") {
				t.Errorf("%s reusing a queued search's callID: %v", name, err)
			}
		}
		if _, ok := s.marks.queued(c); !ok {
			t.Fatal("the search's answer left the queue: the test did not test a queued search")
		}
		if got, _, _ := s.Get(ctx, m.ID); got.Content != m.Content || got.ForgottenAt != nil {
			t.Errorf("the refused writes changed the memory: %+v", got)
		}
		flushUsed(t, s)
		if again, err := s.Search(ctx, c, "cache", nil, 0, later); err != nil || len(again.Hits) != 1 || again.Hits[0].Score != first.Hits[0].Score {
			t.Errorf("repeat of the search after the refused writes: %+v %v, want the first answer", again, err)
		}
	})
	t.Run("other tool", func(t *testing.T) {
		s := setup(t)
		m := remember(t, s, c, "some text").Memory
		_, err := s.Forget(ctx, c, m.ID, "", t0)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "already used for memory_remember") {
			t.Errorf("callID reused for another tool: %v", err)
		}
	})
	t.Run("errors are not memoized", func(t *testing.T) {
		s := setup(t)
		if _, err := s.Forget(ctx, c, "mem_000000000000deadbeef", "", t0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("forget unknown: %v", err)
		}
		if r, err := s.Remember(ctx, c, RememberArgs{Content: "now it works"}, t0); err != nil || r.Repeat || !r.Created {
			t.Errorf("after an error: %+v %v", r, err)
		}
	})
}

func TestBadRequests(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	m := remember(t, s, alice, "something to update").Memory
	tooLong := strings.Repeat("é", MaxContent+1)
	nineTags := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"empty content", func() error { _, err := s.Remember(ctx, alice, RememberArgs{Content: " \n\t "}, t0); return err }, "content is empty"},
		{"content too long", func() error { _, err := s.Remember(ctx, alice, RememberArgs{Content: tooLong}, t0); return err }, "content is 2001 characters"},
		{"unknown kind", func() error {
			_, err := s.Remember(ctx, alice, RememberArgs{Content: "x", Kind: "rumour"}, t0)
			return err
		}, `kind "rumour" is unknown`},
		{"too many tags", func() error {
			_, err := s.Remember(ctx, alice, RememberArgs{Content: "x", Tags: nineTags}, t0)
			return err
		}, "9 tags, at most 8"},
		{"empty tag", func() error {
			_, err := s.Remember(ctx, alice, RememberArgs{Content: "x", Tags: []string{"ok", "  "}}, t0)
			return err
		}, "tag 2 is empty"},
		{"tag too long", func() error {
			_, err := s.Remember(ctx, alice, RememberArgs{Content: "x", Tags: []string{strings.Repeat("t", 33)}}, t0)
			return err
		}, "over the limit of 32"},
		{"branch too long", func() error {
			_, err := s.Remember(ctx, alice, RememberArgs{Content: "x", Branch: strings.Repeat("b", 201)}, t0)
			return err
		}, "branch is 201 characters"},
		{"no project", func() error { _, err := s.Remember(ctx, Caller{}, RememberArgs{Content: "x"}, t0); return err }, "no project"},
		{"update nothing", func() error { _, err := s.Update(ctx, alice, m.ID, UpdateArgs{}, t0); return err }, "nothing to update"},
		{"update empty content", func() error { _, err := s.Update(ctx, alice, m.ID, UpdateArgs{Content: ptr(" ")}, t0); return err }, "content is empty"},
		{"update empty kind", func() error { _, err := s.Update(ctx, alice, m.ID, UpdateArgs{Kind: ptr("")}, t0); return err }, "kind is empty"},
		{"update bad tags", func() error {
			_, err := s.Update(ctx, alice, m.ID, UpdateArgs{Tags: &nineTags}, t0)
			return err
		}, "9 tags"},
		{"search no words", func() error { _, err := s.Search(ctx, alice, " *** ", nil, 0, t0); return err }, "query has no words"},
		{"search emoji only", func() error { _, err := s.Search(ctx, alice, "🚀🔥", nil, 0, t0); return err }, "query has no words"},
		{"search limit high", func() error { _, err := s.Search(ctx, alice, "x", nil, 51, t0); return err }, "limit 51 is out of range"},
		{"search limit negative", func() error { _, err := s.Search(ctx, alice, "x", nil, -1, t0); return err }, "limit -1 is out of range"},
		{"search unknown kind", func() error { _, err := s.Search(ctx, alice, "x", []string{"fact", "gossip"}, 0, t0); return err }, `kind "gossip" is unknown`},
		{"list limit", func() error { _, err := s.List(ctx, ListQuery{Limit: 1001}); return err }, "limit 1001"},
		{"list kind", func() error { _, err := s.List(ctx, ListQuery{Kind: "nope"}); return err }, `kind "nope"`},
		{"list query no words", func() error { _, err := s.List(ctx, ListQuery{Query: "!!"}); return err }, "query has no words"},
		{"related limit", func() error { _, err := s.Related(ctx, alice.Project, "x", 99); return err }, "limit 99"},
		{"import bad id", func() error {
			_, err := s.Import(ctx, []Memory{{ID: "mem_x", Project: "p", Content: "c"}}, t0)
			return err
		}, `id "mem_x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want ErrBadRequest saying %q", err, tt.want)
			}
		})
	}
	// The longest content allowed, counted in characters, is fine.
	if _, err := s.Remember(ctx, alice, RememberArgs{Content: tooLong[:len(tooLong)-len("é")]}, t0); err != nil {
		t.Errorf("content of %d characters: %v", MaxContent, err)
	}
	if _, err := s.Update(ctx, alice, "not-an-id", UpdateArgs{Kind: ptr("fact")}, t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("malformed id: %v", err)
	}
	if _, _, err := s.Get(ctx, "mem_000000000000deadbeef"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get unknown: %v", err)
	}
	if n, _ := s.Count(ctx); n != 2 {
		t.Errorf("count %d: a refused call wrote", n)
	}
}

func TestSearchQueries(t *testing.T) {
	s := setup(t)
	ids := map[string]string{}
	for key, content := range map[string]string{
		"gw":      "The api-gw-02 host fronts every public route",
		"loader":  "Config is read by src/config/loader.go at start",
		"quote":   `The "unbalanced quote" warning comes from the YAML linter`,
		"near":    "NEAR( is how FTS5 proximity queries start",
		"foo":     "foo is the placeholder service in examples",
		"colval":  "Filters use col:val pairs in the admin UI",
		"ab":      `Escape a"b as a""b in CSV exports`,
		"emoji":   "Release days are marked with 🚀 in the changelog rocket",
		"or":      "OR gates live in the logic module",
		"caret":   "The ^x shortcut cuts the line in the editor xterm",
		"weather": "The weather service caches forecasts for an hour",
		"diacrit": "Le café du coin ferme à midi",
	} {
		ids[key] = remember(t, s, alice, content).Memory.ID
	}
	tests := []struct {
		query string
		want  string // the key of the best hit
	}{
		{"api-gw-02", "gw"},
		{"src/config/loader.go", "loader"},
		{`"unbalanced`, "quote"},
		{"NEAR(", "near"},
		{"foo AND", "foo"},
		{"* foo", "foo"},
		{"OR", "or"},
		{"^x", "caret"},
		{"col:val", "colval"},
		{`a"b`, "ab"},
		{"🚀 release", "emoji"},
		{"release🚀", "emoji"},
		{"cafe", "diacrit"},
		{"CAFÉ", "diacrit"},
		{"the weather", "weather"},
		{"how is the weather", "weather"},
		{"-weather-", "weather"},
		{"weather" + strings.Repeat(" forecast", 3000), "weather"},
		{strings.Repeat("x", 10000) + " weather", "weather"},
		{"weather " + strings.Repeat("zz ", 3400), "weather"},
	}
	for _, tt := range tests {
		name := tt.query
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			got := found(t, s, alice, tt.query)
			if len(got) == 0 || got[0] != ids[tt.want] {
				t.Errorf("search %q found %v, want %s first", name, got, ids[tt.want])
			}
		})
	}
	// Words of a 10,000-character query past the first 32 are cut.
	var long string
	for i := range 40 {
		long += fmt.Sprintf("filler%d ", i)
	}
	long += "weather"
	if got := found(t, s, alice, long); len(got) != 0 {
		t.Errorf("word 41 was searched: %v", got)
	}
	// Nothing that is FTS5 syntax alone finds anything, nor fails.
	for _, q := range []string{`"`, `""`, "AND", "NOT", "(", ")", "a:b:c", "-", "{col}", "NEAR(a b, 2)", "x*"} {
		if _, err := s.Search(context.Background(), alice, q, nil, 0, t0); err != nil && !errors.Is(err, ErrBadRequest) {
			t.Errorf("search %q: %v", q, err)
		}
	}
}

func TestSearchRankingAndFilters(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	tagged := remember(t, s, alice, "Run migrations with the goose tool", RememberArgs{Kind: "command", Tags: []string{"postgres"}}).Memory
	inContent := remember(t, s, alice, "postgres runs in a container on port 5432", RememberArgs{Kind: "fact"}).Memory
	r, err := s.Search(ctx, alice, "postgres", nil, 0, t0)
	if err != nil || len(r.Hits) != 2 || r.Hits[0].Memory.ID != inContent.ID {
		t.Fatalf("content should outrank tags: %+v %v", r.Hits, err)
	}
	if r.Hits[0].Score <= 0 || r.Hits[1].Score > r.Hits[0].Score {
		t.Errorf("scores %v %v", r.Hits[0].Score, r.Hits[1].Score)
	}
	// Marked used, in the answer and in the store.
	later := t0.Add(24 * time.Hour)
	flushUsed(t, s)
	if got, _, _ := s.Get(ctx, tagged.ID); got.UsedAt == nil || !got.UsedAt.Equal(t0) {
		t.Errorf("used at %v", got.UsedAt)
	}
	r, _ = s.Search(ctx, alice, "postgres", []string{"command"}, 1, later)
	if len(r.Hits) != 1 || r.Hits[0].Memory.ID != tagged.ID || !r.Hits[0].Memory.UsedAt.Equal(later) {
		t.Errorf("kinds filter: %+v", r.Hits)
	}
	r, _ = s.Search(ctx, alice, "postgres", nil, 1, later)
	if len(r.Hits) != 1 {
		t.Errorf("limit 1: %+v", r.Hits)
	}
	// List by query ranks alike and marks nothing.
	list, err := s.List(ctx, ListQuery{Projects: one(alice.Project), Query: "postgres", Kind: "fact"})
	if err != nil || len(list) != 1 || list[0].ID != inContent.ID {
		t.Errorf("list query %+v %v", list, err)
	}
}

func TestRecencyBoost(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	old := remember(t, s, alice, "redis eviction policy is allkeys-lru").Memory
	recent := remember(t, s, alice, "redis eviction policy is allkeys-lfu").Memory
	// Equal relevance: the one used lately ranks first.
	month := t0.Add(60 * 24 * time.Hour)
	if _, err := s.Update(ctx, alice, recent.ID, UpdateArgs{Kind: ptr("fact")}, month); err != nil {
		t.Fatal(err)
	}
	r, err := s.Search(ctx, alice, "redis eviction", nil, 0, month)
	if err != nil || len(r.Hits) != 2 || r.Hits[0].Memory.ID != recent.ID || r.Hits[1].Memory.ID != old.ID {
		t.Errorf("recency: %+v %v", r.Hits, err)
	}
}

func TestList(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	var want []string
	for i := range 25 {
		r, err := s.Remember(ctx, alice, RememberArgs{Content: fmt.Sprintf("note number %d", i)}, t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{r.Memory.ID}, want...) // newest first
	}
	remember(t, s, Caller{Project: "other"}, "not listed")
	var got []string
	after := ""
	for {
		page, err := s.List(ctx, ListQuery{Projects: one(alice.Project), Limit: 10, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			got = append(got, m.ID)
		}
		after = page[len(page)-1].ID
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("pages\n%v, want\n%v", got, want)
	}
	if all, _ := s.List(ctx, ListQuery{}); len(all) != 26 {
		t.Errorf("all projects: %d", len(all))
	}
}

// sectionLine is one well-formed memory line of a section.
var sectionLine = regexp.MustCompile(`^- \[mem_[0-9a-f]{20}\] \((fact|decision|preference|command|pitfall|todo)\) \S[^\n]*$`)

func TestSection(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	if sec, err := s.Section(ctx, alice.Project, 2000, t0); sec != "" || err != nil {
		t.Errorf("no memories: %q %v", sec, err)
	}
	kinds := map[string]string{}
	for i := range 40 {
		kind := Kinds[i%len(Kinds)]
		content := fmt.Sprintf("Memory %d of kind %s: %s", i, kind, strings.Repeat("word ", i%9))
		if i == 7 {
			content = "multi\nline\r\ncontent"
		}
		r, err := s.Remember(ctx, alice, RememberArgs{Content: content, Kind: kind}, t0)
		if err != nil {
			t.Fatal(err)
		}
		kinds[r.Memory.ID] = kind
	}
	for _, budget := range []int{2000, 700, 300, 100} {
		sec, err := s.Section(ctx, alice.Project, budget, t0)
		if err != nil {
			t.Fatal(err)
		}
		if n := utf8.RuneCountInString(sec); n > budget {
			t.Errorf("budget %d: section of %d characters", budget, n)
		}
		lines := strings.Split(sec, "\n")
		if lines[0] != "Memories of this project:" || len(lines) < 2 {
			t.Fatalf("budget %d: section %q", budget, sec)
		}
		seenFact := false
		for _, l := range lines[1:] {
			if !sectionLine.MatchString(l) {
				t.Errorf("budget %d: malformed line %q", budget, l)
			}
			kind := kinds[l[3:27]]
			if kind == "fact" {
				seenFact = true
			}
			if seenFact && (kind == "decision" || kind == "pitfall") {
				t.Errorf("budget %d: %s after a fact at equal recency:\n%s", budget, kind, sec)
			}
		}
	}
	// Nothing fits: no section.
	if sec, _ := s.Section(ctx, alice.Project, 30, t0); sec != "" {
		t.Errorf("tiny budget: %q", sec)
	}
	// Every memory fits a large budget, and the multi-line one is one line (each line break
	// character a space, so lengths read from the index hold).
	sec, _ := s.Section(ctx, alice.Project, 100000, t0)
	if n := strings.Count(sec, "\n"); n != 40 || !strings.Contains(sec, ") multi line  content") {
		t.Errorf("large budget: %d lines\n%s", n, sec)
	}
}

func TestSectionOrderAndUse(t *testing.T) {
	// A year-old decision is stale by default (90 days) and left out of the section; this
	// test is about ranking, so staleness waits two years.
	s := setup(t, Options{StaleAfter: 2 * 365 * 24 * time.Hour})
	ctx := context.Background()
	fact := remember(t, s, alice, "a plain fact").Memory
	decision := remember(t, s, alice, "a decision we took", RememberArgs{Kind: "decision"}).Memory
	now := t0.Add(365 * 24 * time.Hour)
	// A fact touched today (1 × 2) still loses to a year-old decision (3 × ~1).
	if _, err := s.Update(ctx, alice, fact.ID, UpdateArgs{Content: ptr("a plain fact, checked")}, now); err != nil {
		t.Fatal(err)
	}
	sec, err := s.Section(ctx, alice.Project, 2000, now)
	if err != nil {
		t.Fatal(err)
	}
	want := "Memories of this project:\n- [" + decision.ID + "] (decision) a decision we took\n- [" + fact.ID + "] (fact) a plain fact, checked"
	if sec != want {
		t.Errorf("section\n%s\nwant\n%s", sec, want)
	}
	flushUsed(t, s)
	if got, _, _ := s.Get(ctx, decision.ID); got.UsedAt == nil || !got.UsedAt.Equal(now) {
		t.Errorf("injected memory not marked used: %v", got.UsedAt)
	}
	// A budget for the header and the shorter line only: the longer is skipped.
	short := utf8.RuneCountInString("Memories of this project:\n- [" + decision.ID + "] (decision) a decision we took")
	sec, _ = s.Section(ctx, alice.Project, short, now)
	if strings.Contains(sec, fact.ID) || !strings.Contains(sec, decision.ID) {
		t.Errorf("exact budget: %q", sec)
	}
}

func TestRelated(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	remember(t, s, alice, "The CI runner image is ubuntu-24.04 with go preinstalled")
	want := remember(t, s, alice, "Kafka consumer lag alerts page the on-call after ten minutes").Memory
	remember(t, s, alice, "The CI cache is keyed by go.sum")
	remember(t, s, alice, "Alerts go to the #ops channel")
	payload := `{"tool":"bash","input":"kubectl logs consumer-7","output":"WARN kafka consumer lag 12000 on partition 3; alert fired; on-call paged"}`
	got, err := s.Related(ctx, alice.Project, payload, 2)
	if err != nil || len(got) == 0 || got[0].ID != want.ID {
		t.Fatalf("related %+v %v, want %s first", got, err, want.ID)
	}
	if len(got) > 2 {
		t.Errorf("limit 2: %d", len(got))
	}
	if m, _, _ := s.Get(ctx, want.ID); m.UsedAt != nil {
		t.Error("related marked a memory used")
	}
	// Asked again, the same answer (kept between calls); a write since is seen at once.
	if again, err := s.Related(ctx, alice.Project, payload, 2); err != nil || !slices.EqualFunc(again, got, func(a, b Memory) bool { return a.ID == b.ID }) {
		t.Errorf("asked again: %+v %v, want %+v", again, err, got)
	}
	if _, err := s.Forget(ctx, alice, want.ID, "obsolete", t0); err != nil {
		t.Fatal(err)
	}
	if again, err := s.Related(ctx, alice.Project, payload, 2); err != nil || slices.ContainsFunc(again, func(m Memory) bool { return m.ID == want.ID }) {
		t.Errorf("after forgetting %s: %+v %v", want.ID, again, err)
	}
	if got, err := s.Related(ctx, alice.Project, "🚀 !!!", 0); err != nil || len(got) != 0 {
		t.Errorf("no words: %+v %v", got, err)
	}
}

func TestExportImport(t *testing.T) {
	src := setup(t)
	ctx := context.Background()
	used := t0.Add(time.Hour)
	var want []Memory
	for i := range 30 {
		c := Caller{Project: fmt.Sprintf("proj-%d", i%3), SessionID: "ses_x", CallID: fmt.Sprintf("call_%d", i)}
		r, err := src.Remember(ctx, c, RememberArgs{Content: fmt.Sprintf("memory %d about topic %d", i, i%7), Kind: Kinds[i%6], Branch: "dev", Tags: []string{"t", fmt.Sprint(i)}}, t0.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.Memory)
	}
	// One forgotten (not exported), one used (kept).
	if _, err := src.Forget(ctx, Caller{}, want[4].ID, "", t0); err != nil {
		t.Fatal(err)
	}
	want = append(want[:4], want[5:]...)
	if _, err := src.Search(ctx, Caller{Project: "proj-0"}, "topic", nil, 50, used); err != nil {
		t.Fatal(err)
	}
	flushUsed(t, src)
	for i, m := range want {
		want[i], _, _ = src.Get(ctx, m.ID)
	}

	var exported []Memory
	after := ""
	for {
		page, err := src.Export(ctx, nil, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		exported = append(exported, page...)
		after = page[len(page)-1].ID
	}
	if len(exported) != len(want) {
		t.Fatalf("exported %d, want %d", len(exported), len(want))
	}
	// Through JSON Lines, as a file would carry them.
	var lines []string
	for _, m := range exported {
		data, _ := json.Marshal(m)
		lines = append(lines, string(data))
	}
	var back []Memory
	for _, l := range lines {
		var m Memory
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		back = append(back, m)
	}

	dst := setup(t)
	added, err := dst.Import(ctx, back, t0.Add(48*time.Hour))
	if err != nil || added != len(want) {
		t.Fatalf("import added %d, %v", added, err)
	}
	for i, m := range want {
		got, log, err := dst.Get(ctx, m.ID)
		if err != nil || !equal(got, m) {
			t.Errorf("imported %d\n%+v, want\n%+v (%v)", i, got, m, err)
		}
		if len(log) != 1 || log[0].Op != "import" {
			t.Errorf("audit %+v", log)
		}
	}
	if added, err := dst.Import(ctx, back, t0.Add(49*time.Hour)); err != nil || added != 0 {
		t.Errorf("second import added %d, %v", added, err)
	}
	// The same content under a new id is a duplicate too.
	dupe := back[0]
	dupe.ID = "mem_000000000000cafecafe"
	if added, _ := dst.Import(ctx, []Memory{dupe}, t0); added != 0 {
		t.Error("imported a live duplicate")
	}
	// Imported memories are searchable in their project.
	if ids := found(t, dst, Caller{Project: "proj-1"}, "topic"); len(ids) != 9 {
		t.Errorf("search after import: %d", len(ids))
	}
	if page, err := dst.Export(ctx, one("proj-1"), "", 0); err != nil || len(page) != 9 {
		t.Errorf("export of one project: %d %v", len(page), err)
	}
	if _, err := dst.Export(ctx, nil, "mem_000000000000ffffffff", 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown cursor: %v", err)
	}
}

func TestRedact(t *testing.T) {
	secret := regexp.MustCompile(`sk-[a-z0-9]+`)
	s := setup(t, Options{Redact: func(v string) string { return secret.ReplaceAllString(v, "[REDACTED]") }})
	ctx := context.Background()
	r, err := s.Remember(ctx, alice, RememberArgs{Content: "The key is sk-abc123 for staging", Tags: []string{"sk-zzz"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Memory.Content != "The key is [REDACTED] for staging" || r.Memory.Tags[0] != "[REDACTED]" {
		t.Errorf("remembered %+v", r.Memory)
	}
	if ids := found(t, s, alice, "abc123"); len(ids) != 0 {
		t.Error("the secret is searchable")
	}
	u, err := s.Update(ctx, alice, r.Memory.ID, UpdateArgs{Content: ptr("now sk-def456")}, t0)
	if err != nil || u.Memory.Content != "now [REDACTED]" {
		t.Errorf("updated %+v %v", u.Memory, err)
	}
	// Content that is only a secret is empty after redaction.
	onlySecret := setup(t, Options{Redact: func(v string) string { return secret.ReplaceAllString(v, "") }})
	if _, err := onlySecret.Remember(ctx, alice, RememberArgs{Content: " sk-abc "}, t0); !errors.Is(err, ErrBadRequest) {
		t.Errorf("content empty after redaction: %v", err)
	}
	n, err := s.Import(ctx, []Memory{{ID: "mem_000000000001aaaaaaaa", Project: "p", Content: "imported sk-xyz"}}, t0)
	if err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if m, _, _ := s.Get(ctx, "mem_000000000001aaaaaaaa"); m.Content != "imported [REDACTED]" {
		t.Errorf("imported %q", m.Content)
	}
}

func TestFreezeContext(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	if _, ok, err := s.FrozenContext(ctx, "ses_1"); ok || err != nil {
		t.Errorf("nothing frozen yet: %v %v", ok, err)
	}
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() {
			text, err := s.FreezeContext(ctx, "ses_1", fmt.Sprintf("text %d", i), t0)
			if err != nil {
				t.Error(err)
			}
			got[i] = text
		})
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] {
			t.Errorf("racing writers got %q", got)
			break
		}
	}
	if text, ok, _ := s.FrozenContext(ctx, "ses_1"); !ok || text != got[0] {
		t.Errorf("frozen %q %v, want %q", text, ok, got[0])
	}
	if text, _ := s.FreezeContext(ctx, "ses_1", "late", t0); text != got[0] {
		t.Errorf("a later writer replaced it: %q", text)
	}
}

func TestPrune(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	c := Caller{Project: alice.Project, SessionID: "ses_p", CallID: "call_1"}
	m, err := s.Remember(ctx, c, RememberArgs{Content: "keep me"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.FreezeContext(ctx, "ses_p", "start text", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FreezeContext(ctx, "ses_q", "newer", t0.Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Prune(ctx, t0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.FrozenContext(ctx, "ses_p"); ok {
		t.Error("old context kept")
	}
	if _, ok, _ := s.FrozenContext(ctx, "ses_q"); !ok {
		t.Error("new context pruned")
	}
	got, log, err := s.Get(ctx, m.Memory.ID)
	if err != nil || got.ForgottenAt != nil || len(log) != 1 {
		t.Errorf("memory after prune: %+v %+v %v", got, log, err)
	}
	// The memo is gone: the callID is new again (and finds the duplicate).
	r, err := s.Remember(ctx, c, RememberArgs{Content: "keep me"}, t0)
	if err != nil || r.Repeat || r.Created || r.Memory.ID != m.Memory.ID {
		t.Errorf("after prune: %+v %v", r, err)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			c := Caller{Project: fmt.Sprintf("proj-%d", g%2), SessionID: fmt.Sprintf("ses_%d", g)}
			for i := range 10 {
				c.CallID = fmt.Sprintf("call_%d", i)
				r, err := s.Remember(ctx, c, RememberArgs{Content: fmt.Sprintf("goroutine %d note %d shared words", g, i%10)}, t0)
				if err != nil {
					t.Error(err)
					return
				}
				c.CallID = fmt.Sprintf("search_%d", i)
				if _, err := s.Search(ctx, c, "shared words", nil, 5, t0); err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 {
					c.CallID = ""
					if _, err := s.Forget(ctx, c, r.Memory.ID, "", t0); err != nil && !errors.Is(err, ErrNotFound) {
						t.Error(err)
					}
				}
				if _, err := s.Section(ctx, c.Project, 500, t0); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if n, err := s.Count(ctx); err != nil || n == 0 {
		t.Errorf("count %d %v", n, err)
	}
}

// TestWordCounts checks the document frequencies against a recount of the live memories.
func TestWordCounts(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	a := remember(t, s, alice, "Deploy with make deploy; deploy twice is fine").Memory
	b := remember(t, s, alice, "Make targets live in the Makefile").Memory
	remember(t, s, Caller{Project: "other"}, "make is GNU make")
	if _, err := s.Update(ctx, alice, a.ID, UpdateArgs{Content: ptr("Deploy with the deploy script")}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forget(ctx, alice, b.ID, "", t0); err != nil {
		t.Fatal(err)
	}
	// An import counts the words of the memories it adds, once each, and not of those it
	// skips (a known content).
	if n, err := s.Import(ctx, []Memory{
		{ID: "mem_000000000001bbbbbbbb", Project: "p", Content: "script runs make"},
		{ID: "mem_000000000002bbbbbbbb", Project: "p", Content: "the script, the script again"},
		{ID: "mem_000000000003bbbbbbbb", Project: "other", Content: "make is GNU make"},
	}, t0); err != nil || n != 2 {
		t.Fatalf("imported %d: %v", n, err)
	}
	want := map[string]int{}
	live, _ := s.List(ctx, ListQuery{})
	for _, m := range live {
		for _, w := range distinct(contentWords(m.Content)) {
			if !stopwords[w] {
				want[w]++
			}
		}
	}
	rows, err := s.r.Query(`SELECT word, docs FROM words WHERE docs > 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var w string
		var n int
		rows.Scan(&w, &n)
		got[w] = n
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("word counts\n%v, want\n%v", got, want)
	}
}

func TestCheckpointsRun(t *testing.T) {
	s := setup(t)
	for i := range 2 * checkpointEvery {
		remember(t, s, alice, fmt.Sprintf("note %d", i))
	}
	testkit.WaitFor(t, 30*time.Second, "a checkpoint after many writes", func() bool {
		kicks, _ := s.cp.Runs()
		return kicks > 0
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("closing twice: %v", err)
	}
}

// TestImportKeepsTheWALBounded: every batch of an import asks for a checkpoint, so an
// import of many batches on one open store starts the WAL over instead of growing it by
// every batch (a million memories left a WAL of more than 3 GB, each batch reading
// through it). The test waits for each batch's checkpoint before the next batch, as a
// quiet machine would serve it; it measures pages, not time.
func TestImportKeepsTheWALBounded(t *testing.T) {
	s := setup(t)
	walPages := func() int64 {
		fi, err := os.Stat(s.Path() + "-wal")
		if err != nil {
			return 0
		}
		return fi.Size() / 4096
	}
	const batches, batch = 10, 200
	kicks0, _ := s.cp.Runs()
	var first int64
	for b := range batches {
		ms := make([]Memory, batch)
		for i := range ms {
			n := b*batch + i
			ms[i] = imported(n, fmt.Sprintf("proj-%d", n%3), fmt.Sprintf("import %d of word%d word%d word%d notes on svc%d and src/pkg%d/file%d.go", n, n%97, n%89, n%83, n%50, n%40, n))
		}
		before := walPages()
		importAll(t, s, ms)
		if b == 0 {
			first = walPages() - before
		}
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the checkpoint of import batch %d", b+1), func() error {
			if kicks, _ := s.cp.Runs(); kicks < kicks0+int64(b+1) {
				return fmt.Errorf("%d checkpoints run since the first batch", kicks-kicks0)
			}
			return nil
		})
	}
	// A WAL that started over holds about the last batch: a few times the first batch's
	// pages, against a dozen batches' without checkpoints.
	if got := walPages(); first <= 0 || got > 4*first {
		t.Errorf("the WAL holds %d pages after %d import batches of %d memories; the first batch wrote %d", got, batches, batch, first)
	}
}

func TestContentSanitized(t *testing.T) {
	s := setup(t)
	m := remember(t, s, alice, "nul\x00byte and bad \xff utf8").Memory
	if m.Content != "nulbyte and bad \uFFFD utf8" {
		t.Errorf("content %q", m.Content)
	}
	sec, _ := s.Section(context.Background(), alice.Project, 2000, t0)
	if !strings.Contains(sec, m.ID) {
		t.Errorf("section %q", sec)
	}
}

// TestImportFixture loads an export written by the first version of the format.
func TestImportFixture(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "export_v1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ms []Memory
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m Memory
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	s := setup(t)
	ctx := context.Background()
	if n, err := s.Import(ctx, ms, t0); err != nil || n != 2 {
		t.Fatalf("import: %d %v", n, err)
	}
	m, _, err := s.Get(ctx, "mem_0195519a3f2b1a2b3c4d")
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != "decision" || m.Branch != "main" || m.Tags[0] != "release" || m.Source.CallID != "call_1" ||
		!m.CreatedAt.Equal(time.Date(2025, 3, 1, 12, 0, 0, 123e6, time.UTC)) || m.UsedAt == nil || !m.UsedAt.Equal(time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("imported %+v", m)
	}
	exported, _ := s.Export(ctx, nil, "", 0)
	for i, m := range exported {
		line, _ := json.Marshal(m)
		var want, got map[string]any
		json.Unmarshal(line, &got)
		json.Unmarshal([]byte(strings.Split(strings.TrimSpace(string(data)), "\n")[i]), &want)
		if key := want["project"].(string); filepath.IsAbs(key) {
			want["folder"] = key // a key that is a folder (a session outside git) is its own folder
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("exported again\n%v, want\n%v", got, want)
		}
	}
}

// TestRareWordBeatsManyNewerCommonMatches: a search names a common word and a rare one; the
// one old memory holding the rare word is found first, though hundreds of newer memories
// match the common word (candidates are gathered rarest word first).
func TestRareWordBeatsManyNewerCommonMatches(t *testing.T) {
	s := setup(t)
	old := remember(t, s, alice, "The service s5 listens on port 8005.")
	ms := make([]Memory, 0, rankCandidates+50)
	for i := range rankCandidates + 50 {
		at := t0.Add(time.Duration(i+1) * time.Minute)
		ms = append(ms, Memory{ID: fmt.Sprintf("mem_%012x%08x", at.UnixMilli(), i), Project: alice.Project, Kind: "fact",
			Content: fmt.Sprintf("Service number %d listens on port %d.", i, 9000+i), CreatedAt: at, UpdatedAt: at})
	}
	if _, err := s.Import(context.Background(), ms, t0); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"port 8005", "8005 port", "listens port 8005"} {
		ids := found(t, s, alice, q)
		if len(ids) == 0 || ids[0] != old.Memory.ID {
			t.Errorf("search %q: the memory with 8005 is not first: %v", q, ids[:min(3, len(ids))])
		}
	}
	list, err := s.List(context.Background(), ListQuery{Projects: one(alice.Project), Query: "port 8005", Limit: 3})
	if err != nil || len(list) == 0 || list[0].ID != old.Memory.ID {
		t.Errorf("List with a query: %v %v", err, list)
	}
}

// TestSectionQueryIsCovered: the section's candidates come from the memories_recent index
// alone; a row read from the table for each of 1,000 candidates was most of its time.
func TestSectionQueryIsCovered(t *testing.T) {
	s := setup(t)
	rows, err := s.r.Query(`EXPLAIN QUERY PLAN `+sectionQuery, "p", 0, "b", sectionCandidates)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	// The packed text is an aggregate over the candidates' subquery: a co-routine whose one
	// search is of the covering index.
	searches := 0
	for _, p := range plan {
		if strings.Contains(p, "SEARCH") || strings.HasPrefix(p, "SCAN memories") {
			searches++
			if !strings.Contains(p, "USING COVERING INDEX memories_recent") {
				searches = -100
			}
		}
	}
	if searches != 1 {
		t.Fatalf("the section's query plan is %q, want one search of the covering index memories_recent and no other read of memories", plan)
	}
}

// TestSearchFindsTheWholeQueryFirst: an old memory holding every word of the query is found
// even when each word alone matches more newer memories than a search reads.
func TestSearchFindsTheWholeQueryFirst(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	var ms []Memory
	ms = append(ms, imported(0, alice.Project, "the gateway retries the deploy after a timeout"))
	for i := 1; i <= rankCandidates+20; i++ {
		ms = append(ms, imported(2*i, alice.Project, fmt.Sprintf("gateway note number %d", i)),
			imported(2*i+1, alice.Project, fmt.Sprintf("deploy note number %d", i)))
	}
	importAll(t, s, ms)
	r, err := s.Search(ctx, alice, "gateway deploy", nil, 5, t0)
	if err != nil || len(r.Hits) == 0 || r.Hits[0].Memory.ID != ms[0].ID {
		t.Fatalf("search for both words: %+v %v; want %s first", r.Hits, err, ms[0].ID)
	}
}

// TestSectionMatchesItsDefinition builds sections of a project of many memories of every
// kind, age and length and compares each with the section computed here from its
// definition: the sectionCandidates most recently used or updated live memories, ranked by
// kindWeight × (1 + exp(−days/30)) then newest id, each line taken when it fits.
func TestSectionMatchesItsDefinition(t *testing.T) {
	s := setup(t, Options{StaleAfter: 10 * 365 * 24 * time.Hour})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	var ms []Memory
	for i := range 1500 {
		m := imported(i, alice.Project, strings.Repeat("word ", 1+rng.IntN(60))+fmt.Sprint(i))
		m.Kind = Kinds[rng.IntN(len(Kinds))]
		m.CreatedAt = t0.Add(-time.Duration(rng.IntN(400*24)) * time.Hour).Truncate(time.Millisecond)
		m.UpdatedAt = m.CreatedAt
		ms = append(ms, m)
	}
	if _, err := s.Import(ctx, ms, t0); err != nil {
		t.Fatal(err)
	}
	for round, budget := range []int{2000, 300, 5000, 40} {
		now := t0.Add(time.Duration(round) * 24 * time.Hour)
		var live []Memory
		for _, m := range ms {
			got, _, err := s.Get(ctx, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, got)
		}
		touched := func(m Memory) time.Time {
			if m.UsedAt != nil && m.UsedAt.After(m.UpdatedAt) {
				return *m.UsedAt
			}
			return m.UpdatedAt
		}
		slices.SortStableFunc(live, func(a, b Memory) int { return touched(b).Compare(touched(a)) })
		live = live[:min(len(live), sectionCandidates)]
		score := func(m Memory) float64 {
			days := max(now.Sub(touched(m)).Hours()/24, 0)
			return kindWeight[m.Kind] * (1 + math.Exp(-days/30))
		}
		slices.SortStableFunc(live, func(a, b Memory) int {
			if c := cmp.Compare(score(b), score(a)); c != 0 {
				return c
			}
			return strings.Compare(b.ID, a.ID)
		})
		want := "Memories of this project:"
		left := budget - utf8.RuneCountInString(want)
		for _, m := range live {
			if left < minLine {
				break
			}
			line := linePrefix(m.ID, m.Kind) + m.Content
			if n := utf8.RuneCountInString(line); n <= left {
				want += line
				left -= n
			}
		}
		if want == "Memories of this project:" {
			want = ""
		}
		got, err := s.Section(ctx, alice.Project, budget, now)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("round %d, budget %d: section\n%s\nwant\n%s", round, budget, got, want)
		}
		flushUsed(t, s) // the next round reads the marks of this one
	}
}

// TestOpenReadOnly: a store opened read-only reads what the store holds, refuses every
// write with ErrReadOnly, and leaves the file as it was; a missing file is an error, not
// a new store.
func TestOpenReadOnly(t *testing.T) {
	s := setup(t)
	r := remember(t, s, alice, "The staging database is pg-staging-3")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Close())
	before, err := os.ReadFile(s.Path())
	must(err)
	ro, err := OpenReadOnly(s.Path(), Options{})
	must(err)
	ctx := context.Background()
	if m, _, err := ro.Get(ctx, r.Memory.ID); err != nil || m.Content != r.Memory.Content {
		t.Fatalf("read-only Get: %+v, %v", m, err)
	}
	if ms, err := ro.List(ctx, ListQuery{Query: "staging"}); err != nil || len(ms) != 1 {
		t.Fatalf("read-only search: %+v, %v", ms, err)
	}
	if _, err := ro.Remember(ctx, alice, RememberArgs{Content: "another"}, t0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Remember: %v, want ErrReadOnly", err)
	}
	if _, err := ro.Forget(ctx, Caller{}, r.Memory.ID, "", t0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Forget: %v, want ErrReadOnly", err)
	}
	must(ro.Close())
	if after, err := os.ReadFile(s.Path()); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the file changed under a read-only store (%v)", err)
	}
	missing := filepath.Join(t.TempDir(), "memories.db")
	if _, err := OpenReadOnly(missing, Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only open of a missing file: %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a read-only open created %s", missing)
	}
}

// TestSourceHost: a memory written outside a tracked session (thatch mcp, protocol §10)
// keeps the host and the client it came through as its source, through a reopen, Get,
// List, and an export imported into another store.
func TestSourceHost(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "data", "memories.db")
	s := openAt(t, path, Options{})
	mcp := Caller{Project: "proj-1", Host: "mcp", Client: "claude-code"}
	r := remember(t, s, mcp, "The CI runs make check before make test.")
	want := Source{Host: "mcp", Client: "claude-code"}
	if r.Memory.Source != want {
		t.Fatalf("remembered with source %+v, want %+v", r.Memory.Source, want)
	}
	data, _ := json.Marshal(r.Memory)
	if !strings.Contains(string(data), `"source":{"sessionID":"","host":"mcp","client":"claude-code"}`) {
		t.Errorf("the memory's JSON is %s", data)
	}
	s.Close()
	s = openAt(t, path, Options{})
	m, _, err := s.Get(ctx, r.Memory.ID)
	if err != nil || m.Source != want {
		t.Fatalf("after a reopen Get gives %+v, %v; want source %+v", m.Source, err, want)
	}
	ms, err := s.Export(ctx, []string{"proj-1"}, "", 0)
	if err != nil || len(ms) != 1 {
		t.Fatalf("export: %v, %d memories", err, len(ms))
	}
	other := setup(t)
	if _, err := other.Import(ctx, ms, t0); err != nil {
		t.Fatal(err)
	}
	if got, _, err := other.Get(ctx, r.Memory.ID); err != nil || got.Source != want {
		t.Errorf("imported with source %+v, %v; want %+v", got.Source, err, want)
	}
	// A session's memory has no host.
	if r := remember(t, s, alice, "A session's memory."); r.Memory.Source.Host != "" || r.Memory.Source.Client != "" {
		t.Errorf("a session's memory has source %+v", r.Memory.Source)
	}
}

// TestCountFollowsEveryWrite: the live count status reads (kept by migration 11's
// triggers) is the count of live memories after a remember, a repeat, a forget, a restore
// and an import, and a store migrated from version 10 starts from the memories it holds.
func TestCountFollowsEveryWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memories.db")
	s := openAt(t, path, Options{})
	ctx := context.Background()
	check := func(step string, want int) {
		t.Helper()
		var scanned int
		if err := s.r.QueryRow(`SELECT count(*) FROM memories WHERE forgotten_at = 0`).Scan(&scanned); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Count(ctx); err != nil || n != want || scanned != want {
			t.Fatalf("after %s: Count %d (%v), scanned %d; want %d", step, n, err, scanned, want)
		}
	}
	check("open", 0)
	a := remember(t, s, alice, "the deploy key lives in the vault").Memory
	remember(t, s, alice, "the gateway retries three times")
	remember(t, s, alice, "the deploy key lives in the vault") // the same: nothing added
	check("remember", 2)
	if _, err := s.Forget(ctx, alice, a.ID, "moved", t0); err != nil {
		t.Fatal(err)
	}
	check("forget", 1)
	if _, err := s.Restore(ctx, Caller{}, a.ID, t0); err != nil {
		t.Fatal(err)
	}
	check("restore", 2)
	imported := Memory{ID: "mem_0195a0b0c0d0e0f0a0b0", Project: alice.Project, Kind: "fact", Content: "imported from another thatch",
		Tags: []string{}, CreatedAt: t0, UpdatedAt: t0}
	if n, err := s.Import(ctx, []Memory{imported}, t0); err != nil || n != 1 {
		t.Fatalf("import: %d %v", n, err)
	}
	check("import", 3)

	// Back to version 10, as a store written before the count was kept: opening it
	// again counts what it holds.
	for _, q := range []string{`DROP TRIGGER memories_live_insert`, `DROP TRIGGER memories_live_update`, `DROP TRIGGER memories_live_delete`,
		`DELETE FROM meta WHERE key = 'live_memories'`, `DELETE FROM schema_migrations WHERE version = 11`} {
		if _, err := s.w.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	remember(t, s, alice, "written by a thatch of version 10")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, Options{})
	check("the migration", 4)
}
