package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/thatch-dev/thatch/journal/memory"
)

// memoryMillion measures memory_search and memory_remember as the memory part does (over
// NATS, MemoryCallers callers at 20 calls/s each) on a store of MillionMemories memories
// over MillionProjects projects. The store is a fixture: built once per invocation (by
// import, in batches of 10,000, then its duplicate pass and index merge, as the daily
// pass does)
// and copied into each run's folder.
func (b *benchRun) memoryMillion(ctx context.Context) error {
	n, np := b.size.MillionMemories, b.size.MillionProjects
	fixture := filepath.Join(b.fixtures, fmt.Sprintf("memories-%dx%d-seed%d", n, np, b.seed))
	projects := make([]string, np)
	for p := range projects {
		projects[p] = filepath.Join(b.fixtures, "projects", fmt.Sprintf("p%03d", p))
		if err := os.MkdirAll(projects[p], 0o755); err != nil {
			return err
		}
	}
	if err := b.millionStore(ctx, fixture, n, projects); err != nil {
		return err
	}
	name := "memory1m"
	t0 := time.Now()
	if err := copyFiles(fixture, filepath.Join(b.dir, name), "memories.db"); err != nil {
		return err
	}
	b.say("memory store of %d memories copied in %s", n, time.Since(t0).Round(time.Millisecond))
	settle()
	return b.memoryOverNATS(ctx, name, projects, n, fmt.Sprintf(" at %s", count(n)))
}

// millionStore builds the store of the memory1m part in dir unless it is there already.
func (b *benchRun) millionStore(ctx context.Context, dir string, n int, projects []string) error {
	done := filepath.Join(dir, "built")
	if _, err := os.Stat(done); err == nil {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	t0 := time.Now()
	defer func() { b.fixtureTime += time.Since(t0) }()
	path := filepath.Join(dir, "memories.db")
	if err := fillStore(ctx, path, rand.New(rand.NewPCG(b.seed, 11)), n, projects, 10_000, b.say); err != nil {
		return err
	}
	imported := time.Since(t0)
	store, err := memory.Open(path, memory.Options{})
	if err != nil {
		return err
	}
	// As the memory part, the store has had its duplicate pass and its index merge (the
	// daily pass) before thatch starts on it: else thatch's first pass runs beside the calls.
	_, err = store.FindDuplicates(ctx, time.Now())
	if err == nil {
		err = store.MergeIndex(ctx)
	}
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	b.say("memory store of %d memories over %d projects built once: import %s, duplicate pass and index merge %s", n, len(projects),
		imported.Round(time.Second), (time.Since(t0) - imported).Round(time.Second))
	return os.WriteFile(done, nil, 0o644)
}

// copyFiles copies the files of from whose names start with prefix (a SQLite database,
// its WAL and shared memory) into the folder to.
func copyFiles(from, to, prefix string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	matches, err := filepath.Glob(filepath.Join(from, prefix+"*"))
	if err != nil {
		return err
	}
	if len(matches) == 0 {
		return fmt.Errorf("no %s* in %s", prefix, from)
	}
	for _, m := range matches {
		if err := copyFile(m, filepath.Join(to, filepath.Base(m))); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// count says n as a figure's name does: 1M, 100k, 2000.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
