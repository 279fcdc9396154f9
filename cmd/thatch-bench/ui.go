package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/adapters/web"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// uiBench renders the operator's pages server side over a journal of UISessions live
// sessions (a third of them children: extraction and task sessions) and a store of
// UIMemories memories, through the real handler and a real loop, and times the loop's
// one piece of work for the page: the copy of the directory (runtime.BuildTable).
func (b *benchRun) uiBench(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(b.seed, 9))
	dir := filepath.Join(b.dir, "ui")
	store, err := journal.Open(filepath.Join(dir, "thatch.db"))
	if err != nil {
		return err
	}
	defer store.Close()
	now := time.Now()
	st := runtime.NewState()
	st.Hosts["h1"] = &runtime.Host{ID: "h1", API: "v1", BootID: "b1", Online: true, Directory: "/w", Heard: now.UnixMilli()}
	fx := runtime.NewEffects()
	fx.Hosts["h1"] = true
	tops := b.size.UISessions * 2 / 3
	var first string
	for i := range b.size.UISessions {
		sid := fmt.Sprintf("ses_%07d", i)
		sess := &runtime.Session{ID: sid, HostID: "h1", Kind: runtime.KindTop, Status: runtime.StatusIdle,
			Directory: fmt.Sprintf("/work/project%02d", i%40), Title: "a session about " + benchWords[rng.IntN(len(benchWords))],
			Touched: now.Add(-time.Duration(rng.IntN(86400)) * time.Second)}
		if i >= tops { // a child of one of the first top-level sessions
			sess.ParentID, sess.Kind = fmt.Sprintf("ses_%07d", (i-tops)%max(1, tops/4)), runtime.KindTask
			if i%3 == 0 {
				sess.Kind, sess.Title = runtime.KindExtraction, runtime.ExtractionTitle
			}
		} else {
			for e := range 5 {
				fx.Entries = append(fx.Entries, runtime.EntryOp{Kind: runtime.EntryInsert, Root: sid, ID: fmt.Sprintf("call_%d", e), At: now,
					Body: &runtime.Body{Tool: "bash", Title: "go test ./...", Output: "ok"}})
			}
		}
		if first == "" {
			first = sid
		}
		st.Sessions[sid] = sess
		fx.Sessions[sid] = true
	}
	if err := store.Commit(&runtime.Batch{Now: now, State: st, Effects: fx}); err != nil {
		return err
	}
	mem, err := memory.Open(filepath.Join(dir, "memories.db"), memory.Options{})
	if err != nil {
		return err
	}
	defer mem.Close()
	base := now.Add(-30 * 24 * time.Hour)
	for start := 0; start < b.size.UIMemories; start += 2000 {
		batch := make([]memory.Memory, 0, 2000)
		for i := start; i < min(start+2000, b.size.UIMemories); i++ {
			at := base.Add(time.Duration(i) * time.Minute).UTC()
			batch = append(batch, memory.Memory{ID: fmt.Sprintf("mem_%012x%08x", at.UnixMilli(), i), Project: fmt.Sprintf("/work/project%02d", i%40),
				Kind: memory.Kinds[rng.IntN(len(memory.Kinds))], Content: benchMemory(rng, i), Tags: []string{benchWords[rng.IntN(len(benchWords))]},
				CreatedAt: at, UpdatedAt: at, Source: memory.Source{SessionID: "ses_bench"}})
		}
		if _, err := mem.Import(ctx, batch, now); err != nil {
			return err
		}
	}
	if _, err := mem.FindDuplicates(ctx, now); err != nil {
		return err
	}

	loop := runtime.NewLoop(store, noCalls{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(lctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-loop.Ready():
	case err := <-done:
		return err
	}
	status := func(ctx context.Context) (runtime.StatusView, error) {
		st := loop.Snapshot().Status
		st.Consuming = true
		n, err := mem.Count(ctx)
		st.Memories = n
		return st, err
	}
	srv := &web.Server{Listen: "127.0.0.1:4224", Loop: loop, Status: status, Journal: store, Memories: mem,
		Sweep:   func(context.Context, string, bool) (runtime.SweepResult, error) { return runtime.SweepResult{}, nil },
		Metrics: web.NewMetrics(web.Source{Status: status, Snapshot: loop.Snapshot, Memories: mem, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}),
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil))}
	h, err := srv.Handler()
	if err != nil {
		return err
	}
	// The page's cookie, as a person's browser has it after thatch ui's link.
	code, _ := srv.NewLogin()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, web.LoginURL("http://127.0.0.1:4224/", code), nil))
	cookie := rec.Result().Cookies()
	if len(cookie) != 1 {
		return fmt.Errorf("the page set no cookie (%d)", rec.Code)
	}
	word := benchWords[0]
	pages := []struct{ name, path, want string }{
		{"overview", "/", "hosts online"},
		{"sessions", "/sessions", fmt.Sprint(b.size.UISessions) + " live sessions"},
		{"session", "/sessions/" + first, "call_0"},
		{"memories", "/memories", "mem_"},
		{"memory search", "/memories?q=" + word, "mem_"},
		{"hygiene", "/hygiene", "Duplicate pairs"},
		{"metrics", "/metrics", "thatch_sessions " + fmt.Sprint(b.size.UISessions)},
	}
	reps := max(50, b.size.MemoryCalls)
	for _, p := range pages {
		var lat []time.Duration
		for range reps {
			req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:4224"+p.path, nil)
			for _, c := range cookie {
				req.AddCookie(c)
			}
			rec := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(rec, req)
			lat = append(lat, time.Since(t0))
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), p.want) {
				return fmt.Errorf("page %s answered %d without %q", p.path, rec.Code, p.want)
			}
		}
		p50, p99 := percentiles(lat)
		b.say("page %s: p50 %s, p99 %s", p.name, p50, p99)
		b.add(Figure{Name: "page " + p.name + " p99", Value: ms(p99), Unit: "ms", Target: "< 100 ms", Goal: under(100),
			Definition: fmt.Sprintf("server-side render of %s (handler, templates, store reads) with %d live sessions and %d memories, %d renders; p50 %.1f ms", p.path, b.size.UISessions, b.size.UIMemories, reps, ms(p50))})
	}
	// What a page costs the loop: once, when the first page opens, the loop publishes its
	// whole directory; from then on each commit publishes only the rows it changed, and
	// pages build their tables on their own goroutines.
	loaded, _, _, err := store.Load()
	if err != nil {
		return err
	}
	var lat []time.Duration
	for range 20 {
		t0 := time.Now()
		t := runtime.BuildTable(loaded, nil, now)
		lat = append(lat, time.Since(t0))
		if len(t.Sessions) != b.size.UISessions {
			return fmt.Errorf("the table holds %d sessions, want %d", len(t.Sessions), b.size.UISessions)
		}
	}
	_, p99 := percentiles(lat)
	b.add(Figure{Name: "page's first open, on the loop", Value: ms(p99), Unit: "ms", Target: "once per thatch run",
		Definition: fmt.Sprintf("publishing the directory of %d live sessions when the first page opens (runtime.BuildTable, p99 of 20; it includes the reader's sort); later commits publish only their own rows", b.size.UISessions)})
	return nil
}

// noCalls is a caller for a loop that makes no host calls.
type noCalls struct{}

func (noCalls) Do(_ context.Context, _ string, c runtime.Call) runtime.Result {
	return runtime.Result{Call: c}
}
