package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/thatch-dev/thatch/adapters/fakehost"
	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/redact"
)

// benchWords is the vocabulary of the synthetic memories: words of a codebase's notes.
var benchWords = strings.Fields(`the build test deploy service gateway config loader cache index query schema
migration handler router client server token session worker queue retry timeout backoff
port socket database table column request response error panic lock mutex channel context
module package import vendor release branch commit merge rebase fixture golden snapshot
metric trace span log level flag option default env variable secret key file folder path
script command flag docker image container volume network proxy certificate TLS DNS
benchmark profile allocation goroutine leak memory disk limit quota budget latency`)

// benchVocabulary is the words of the synthetic memories, most frequent first: the code
// words above, then made-up words (names, identifiers, jargon). Words are drawn with a Zipf
// law, as in real text: a few very common, a long tail of rare ones.
var benchVocabulary = func() []string {
	syllables := strings.Fields("ka ro mi tel san dor vex lu pra gin hal sto bre qui fen")
	out := append([]string(nil), benchWords...)
	for i := 0; len(out) < 8000; i++ {
		w := ""
		for n := i; ; n /= len(syllables) {
			w += syllables[n%len(syllables)]
			if n < len(syllables) {
				break
			}
		}
		out = append(out, w)
	}
	return out
}()

// benchWord draws one word of the vocabulary.
func benchWord(z *rand.Zipf) string { return benchVocabulary[z.Uint64()] }

func benchZipf(rng *rand.Rand) *rand.Zipf {
	return rand.NewZipf(rng, 1.1, 2, uint64(len(benchVocabulary)-1))
}

// benchMemory is one synthetic memory's content: 10 to 60 words with an identifier or two,
// as an extraction writes them.
func benchMemory(rng *rand.Rand, i int) string {
	z := benchZipf(rng)
	n := 10 + rng.IntN(50)
	var b strings.Builder
	for w := range n {
		if w > 0 {
			b.WriteByte(' ')
		}
		switch rng.IntN(14) {
		case 0:
			fmt.Fprintf(&b, "svc-%d-%02d", rng.IntN(50), rng.IntN(100))
		case 1:
			fmt.Fprintf(&b, "src/%s/%s.go", benchWord(z), benchWord(z))
		default:
			b.WriteString(benchWord(z))
		}
	}
	fmt.Fprintf(&b, " (note %d).", i)
	return b.String()
}

// memoryBench measures the memory store over NATS on a store of many memories: search,
// remember (with its similarity check), the session-start section, and the broker's
// request/reply echo in the same run as the floor they stand on.
func (b *benchRun) memoryBench(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(b.seed, 7))
	name := "memory"
	dir := filepath.Join(b.dir, name)
	projects := make([]string, b.size.MemoryProjects)
	for p := range projects {
		projects[p] = filepath.Join(b.dir, "projects", fmt.Sprintf("p%03d", p))
		if err := os.MkdirAll(projects[p], 0o755); err != nil {
			return err
		}
	}
	// The store is filled through import, in batches, before thatch starts on it.
	t0 := time.Now()
	if err := fillStore(ctx, filepath.Join(dir, "memories.db"), rng, b.size.Memories, projects, 2000, nil); err != nil {
		return err
	}
	built := time.Since(t0)
	store, err := memory.Open(filepath.Join(dir, "memories.db"), memory.Options{})
	if err != nil {
		return err
	}
	b.say("memory store of %d memories over %d projects built in %s", b.size.Memories, len(projects), built.Round(time.Millisecond))
	b.add(Figure{Name: "memory import", Value: float64(b.size.Memories) / built.Seconds(), Unit: "memories/s", Target: "≥ 1,000/s", Goal: atLeast(1000),
		Definition: fmt.Sprintf("importing %d memories of %d projects in batches of 2,000 into an empty store (the store's bulk write, its index and word counts included)", b.size.Memories, len(projects))})
	t1 := time.Now()
	pairs, err := store.FindDuplicates(ctx, time.Now())
	if err != nil {
		store.Close()
		return err
	}
	pass := time.Since(t1)
	b.say("duplicate pass: %s, %d pairs", pass.Round(time.Millisecond), pairs)
	b.add(Figure{Name: "duplicate pass", Value: pass.Seconds(), Unit: "s", Target: "≤ 3 s", Goal: atMost(3),
		Definition: fmt.Sprintf("the periodic all-pairs duplicate pass (MinHash, LSH banding per project) over %d memories of %d projects, in process", b.size.Memories, len(projects))})
	// The daily pass merges the full-text index after it.
	t2 := time.Now()
	err = store.MergeIndex(ctx)
	store.Close()
	if err != nil {
		return err
	}
	merge := time.Since(t2)
	b.say("index merge: %s", merge.Round(time.Millisecond))
	b.add(Figure{Name: "index merge", Value: merge.Seconds(), Unit: "s",
		Definition: fmt.Sprintf("merging the full-text index of %d memories into one segment after an import and the pass, 256 pages a write, in process", b.size.Memories)})
	b.redactorCost()
	if size := dirSize(dir); size > 0 {
		b.add(Figure{Name: "memory store size", Value: float64(size) / float64(b.size.Memories) * 1000 / (1 << 20), Unit: "MiB per 1,000 memories",
			Definition: fmt.Sprintf("memories.db with its full-text index, %d synthetic memories of 10 to 60 words", b.size.Memories)})
	}

	settle() // the import's, the pass's and the merge's pages
	if err := b.memoryOverNATS(ctx, name, projects, b.size.Memories, ""); err != nil {
		return err
	}
	// The section is built in process: it is the store's work, without the broker.
	store, err = memory.Open(filepath.Join(dir, "memories.db"), memory.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	// 20 sections per project, 2,000 in the full run: the p99 of the 200 this loop took
	// before was its second slowest, one stall of the machine.
	var lat []time.Duration
	for i := range b.size.MemoryCalls * 20 {
		t := time.Now()
		text, err := store.Section(ctx, projects[i%len(projects)], 2000, time.Now())
		lat = append(lat, time.Since(t))
		if err != nil || !strings.HasPrefix(text, "Memories of this project:") {
			return fmt.Errorf("section of %s: %v %q", projects[i%len(projects)], err, text)
		}
	}
	p50, p99 := percentiles(lat)
	b.say("session-start section: p50 %s, p99 %s", p50, p99)
	b.add(Figure{Name: "memory section p50", Value: ms(p50), Unit: "ms", Definition: fmt.Sprintf("building a project's session-start memories section (2,000 characters) in process, %d memories a project, %d sections one after another", b.size.Memories/len(projects), len(lat))})
	b.add(Figure{Name: "memory section p99", Value: ms(p99), Unit: "ms", Target: "≤ 5 ms", Goal: atMost(5), Definition: "as above, 99th percentile"})
	return nil
}

// memoryOverNATS runs thatch on the store of the folder name (memories memories over
// projects) and measures the memory tools over NATS; the figures' names end in suffix.
func (b *benchRun) memoryOverNATS(ctx context.Context, name string, projects []string, memories int, suffix string) error {
	rng := rand.New(rand.NewPCG(b.seed, 8))
	_, stop, err := b.startThatch(name, nil)
	if err != nil {
		return err
	}
	defer stop()
	// A host and sessions of its own per store: the broker drops an event whose id it
	// saw in the last two minutes, and a fake host numbers its events from 1.
	host := "mem" + strings.NewReplacer(" ", "", "at", "").Replace(suffix)
	sid := func(c int) string { return fmt.Sprintf("ses_%s_%03d", host, c) }
	fh, err := fakehost.New(b.nc, host, "v1")
	if err != nil {
		return err
	}
	defer fh.Close()
	if err := fh.Hello(ctx, "b1"); err != nil {
		return err
	}
	callers := b.size.MemoryCallers
	for c := range callers {
		if err := fh.Created(ctx, sid(c), "", "t", projects[c%len(projects)]); err != nil {
			return err
		}
	}
	// Queries as a model asks them: an identifier, a path, or two or three words of the
	// memories' own vocabulary (common ones included).
	z := benchZipf(rng)
	queries := make([]string, 512)
	for i := range queries {
		switch i % 4 {
		case 0:
			queries[i] = fmt.Sprintf("svc-%d-%02d", rng.IntN(50), rng.IntN(100))
		case 1:
			queries[i] = "src/" + benchWord(z) + "/" + benchWord(z) + ".go"
		case 2:
			queries[i] = benchWord(z) + " " + benchWord(z)
		default:
			queries[i] = benchWord(z) + " " + benchWord(z) + " " + benchWord(z)
		}
	}
	var seq int
	var seqMu sync.Mutex
	next := func() int { seqMu.Lock(); defer seqMu.Unlock(); seq++; return seq }
	phases := []struct {
		name, target, def string
		goal              *Goal
		call              func(sid string, i int) error
	}{
		{"memory_search", "≤ 10 ms", "a memory_search of 1 to 3 words or an identifier over NATS, limit 10", atMost(10), func(sid string, i int) error {
			_, herr, err := fh.Tool(ctx, "thatch", runtime.ToolSearch, sid, map[string]any{"query": queries[i%len(queries)]})
			return firstErr(err, herr)
		}},
		{"memory_remember", "≤ 20 ms", "a memory_remember of a new 10-60 word memory over NATS, its similarity check included", atMost(20), func(sid string, i int) error {
			n := memories + next()
			content := benchMemory(rand.New(rand.NewPCG(b.seed, uint64(n))), n)
			_, herr, err := fh.Tool(ctx, "thatch", runtime.ToolRemember, sid, map[string]any{"content": content, "kind": "fact"})
			return firstErr(err, herr)
		}},
	}
	for _, ph := range phases {
		lat, err := pacedCalls(callers, b.size.MemoryCalls, 20, func(_ string, i int) error { return ph.call(sid(i/b.size.MemoryCalls), i) })
		if err != nil {
			return fmt.Errorf("%s: %w", ph.name, err)
		}
		p50, p99 := percentiles(lat)
		b.say("%s%s, %d callers at 20 calls/s each: p50 %s, p99 %s", ph.name, suffix, callers, p50, p99)
		b.add(Figure{Name: ph.name + " p50" + suffix, Value: ms(p50), Unit: "ms", Definition: fmt.Sprintf("%s; %d callers each calling 20 times a second, %d memories over %d projects", ph.def, callers, memories, len(projects))})
		b.add(Figure{Name: ph.name + " p99" + suffix, Value: ms(p99), Unit: "ms", Target: ph.target, Goal: ph.goal, Definition: "as above, 99th percentile"})
	}
	return nil
}

// fillStore imports n synthetic memories over projects into the store at path, in batches
// of batch, saying how far it got every tenth of the way when say is not nil. The store
// checkpoints its WAL after each batch, so one open store takes them all.
func fillStore(ctx context.Context, path string, rng *rand.Rand, n int, projects []string, batch int, say func(string, ...any)) error {
	store, err := memory.Open(path, memory.Options{})
	if err != nil {
		return err
	}
	base := time.Now().Add(-90 * 24 * time.Hour)
	for start := 0; start < n; start += batch {
		ms := make([]memory.Memory, 0, batch)
		for i := start; i < min(start+batch, n); i++ {
			at := base.Add(time.Duration(i) * time.Minute).UTC()
			ms = append(ms, memory.Memory{ID: fmt.Sprintf("mem_%012x%08x", at.UnixMilli(), i), Project: projects[i%len(projects)],
				Kind: memory.Kinds[rng.IntN(len(memory.Kinds))], Content: benchMemory(rng, i), Tags: []string{benchWords[rng.IntN(len(benchWords))]},
				CreatedAt: at, UpdatedAt: at, Source: memory.Source{SessionID: "ses_bench"}})
		}
		if _, err := store.Import(ctx, ms, time.Now()); err != nil {
			store.Close()
			return err
		}
		if say != nil && (start/batch+1)%max(1, n/batch/10) == 0 {
			say("memory store: %d/%d memories imported", start+len(ms), n)
		}
	}
	return store.Close()
}

// redactorCost measures the redactor on realistic tool output: a build log with paths,
// hashes and a few secrets.
func (b *benchRun) redactorCost() {
	var sb strings.Builder
	for i := 0; sb.Len() < 8<<10; i++ {
		fmt.Fprintf(&sb, "ok  \tgithub.com/acme/api/internal/pkg%d\t0.%03ds\tcoverage: %d.%d%% of statements\n", i, i*7%1000, i%100, i%10)
		fmt.Fprintf(&sb, "src/pkg%d/handler.go:%d:%d: commit 9f2c%08x token := lexer.Next() // sha256:%064x\n", i, i*3, i%80, i*2654435761, i)
		if i%20 == 0 {
			sb.WriteString("export GITHUB_TOKEN=ghp_R8x2Kq9LmZ4vT7wN1pB6yC3dF5gH0jS2aE4u DB_PASSWORD=hunter2\n")
		}
	}
	text := sb.String()
	const rounds = 400
	t := time.Now()
	for range rounds {
		redact.Text(text)
	}
	perKB := float64(time.Since(t).Microseconds()) / 1000 / rounds / (float64(len(text)) / 1024)
	b.say("redactor: %.4f ms per KB of tool output", perKB)
	b.add(Figure{Name: "redactor cost", Value: perKB, Unit: "ms/KB", Target: "≤ 0.5 ms/KB", Goal: atMost(0.5),
		Definition: fmt.Sprintf("redact.Text over %d KB of build output with paths, hashes and a few secrets, %d rounds", len(text)/1024, rounds)})
}

func firstErr(err error, herr *runtime.HostError) error {
	if err != nil {
		return err
	}
	if herr != nil {
		return herr
	}
	return nil
}

// pacedCalls has callers each make calls calls at perSec a second and returns their
// latencies.
func pacedCalls(callers, calls, perSec int, call func(sid string, i int) error) ([]time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	every := time.Second / time.Duration(perSec)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("ses_mem_%03d", c)
			next := time.Now().Add(time.Duration(c) * every / time.Duration(callers))
			for i := range calls {
				time.Sleep(time.Until(next))
				next = next.Add(every)
				t0 := time.Now()
				if err := call(sid, c*calls+i); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return lat, <-errs
}

// dirSize is the bytes of the files under dir whose names start with memories.db.
func dirSize(dir string) int64 {
	var n int64
	matches, _ := filepath.Glob(filepath.Join(dir, "memories.db*"))
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil {
			n += fi.Size()
		}
	}
	return n
}
