package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thatch-dev/thatch/internal/testkit"
	"github.com/thatch-dev/thatch/journal"
	"github.com/thatch-dev/thatch/runtime"
)

// fillJournal makes the journal's database full: SQLite's max_page_count at its size now
// makes every write that needs a new page fail with SQLITE_FULL, as a full disk does.
// room gives it space again.
func fillJournal(t *testing.T, s *journal.Store) (room func()) {
	t.Helper()
	var pages int
	if err := s.DB().QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages)); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := s.DB().Exec(`PRAGMA max_page_count = 1073741823`); err != nil {
			t.Error(err)
		}
	}
}

// A tool call gets an answer while the journal cannot write (issue 29, point 6): the
// calls waiting for the failed commit, and those that arrive while it fails, are
// answered at once with the cause, a full disk naming the folder to free; an input
// submitted meanwhile is refused the same way. Once the journal can write again, the
// events are applied and the call is answered as usual: nothing is lost.
func TestLoopToolCallAnsweredWhileJournalFull(t *testing.T) {
	dir := t.TempDir()
	r := startLoop(t, dir, &hostSwitch{})
	r.hello("b1")
	r.created("ses_a")
	r.waitView("the session", func(v runtime.View) bool { return v.Pos == 2 })
	room := fillJournal(t, r.store)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	payload := func(minSeq uint64) runtime.Answer {
		return r.loop.Tool(ctx, runtime.ToolCall{Name: runtime.ToolPayload, SessionID: "ses_a", Args: json.RawMessage(`{}`)}, minSeq)
	}
	wantDisk := func(what string, msg string) {
		t.Helper()
		if !strings.HasPrefix(msg, "disk full: free space in "+dir) || !strings.Contains(msg, "call again") {
			t.Errorf("%s: %q, want the disk named first and what to do", what, msg)
		}
	}
	// This call waits for the event below, whose commit fails.
	var waiting runtime.Answer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); waiting = payload(3) }()
	r.deliver("tool_c1", "tool.execute.after", bigTool("ses_a", "c1", 6000, 6000))
	wg.Wait()
	if waiting.Err == nil {
		t.Fatalf("the call waiting for the failed commit got %+v, want the journal's error", waiting)
	}
	wantDisk("the call waiting for the commit", waiting.Err.Message)

	again := payload(3)
	if again.Err == nil {
		t.Fatalf("a call while the journal fails got %+v, want the journal's error", again)
	}
	wantDisk("a call while the journal fails", again.Err.Message)
	if err := r.loop.Submit(ctx, runtime.Tick{}); err == nil {
		t.Error("an input submitted while the journal fails was taken")
	} else {
		wantDisk("an input while the journal fails", err.Error())
	}

	room()
	var a runtime.Answer
	testkit.WaitFor(t, 30*time.Second, "the loop's retried commit to succeed", func() bool {
		a = payload(3)
		return a.Err == nil || !strings.HasPrefix(a.Err.Message, "disk full")
	})
	if a.Err != nil || a.Payload == nil || len(a.Payload.Entries) != 1 || a.Payload.Entries[0].ID != "c1" {
		t.Fatalf("once the journal can write: %+v, want c1's payload", a)
	}
}

// blockingJournal is a journal whose commits hang while hang is set, as a commit on a
// failing disk can.
type blockingJournal struct {
	*journal.Store
	mu      sync.Mutex
	hang    bool
	entered chan struct{} // closed as the first hanging commit begins
	once    sync.Once
	release chan struct{}
}

func (j *blockingJournal) Commit(b *runtime.Batch) error {
	j.mu.Lock()
	hang := j.hang
	j.mu.Unlock()
	if hang {
		j.once.Do(func() { close(j.entered) })
		<-j.release
	}
	return j.Store.Commit(b)
}

// A tool call whose commit does not complete gets an answer within WaitApplied +
// CommitWait, saying the journal did not commit in time.
func TestLoopToolCallAnsweredWhenCommitHangs(t *testing.T) {
	dir := t.TempDir()
	var j *blockingJournal
	r := startLoopTuned(t, dir, &hostSwitch{}, func(l *runtime.Loop) {
		j = &blockingJournal{Store: l.Journal.(*journal.Store), entered: make(chan struct{}), release: make(chan struct{})}
		l.Journal, l.WaitApplied, l.CommitWait = j, 50*time.Millisecond, 50*time.Millisecond
	})
	r.hello("b1")
	r.created("ses_a")
	r.waitView("the session", func(v runtime.View) bool { return v.Pos == 2 })
	j.mu.Lock()
	j.hang = true
	j.mu.Unlock()
	r.deliver("tool_c1", "tool.execute.after", bigTool("ses_a", "c1", 100, 0))
	<-j.entered
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := r.loop.Tool(ctx, runtime.ToolCall{Name: runtime.ToolPayload, SessionID: "ses_a", Args: json.RawMessage(`{}`)}, 3)
	if a.Err == nil || !strings.Contains(a.Err.Message, "did not commit within 100ms") {
		t.Errorf("a call whose commit hangs got %+v, want the journal's delay named", a)
	}
	j.mu.Lock()
	j.hang = false
	j.mu.Unlock()
	close(j.release)
}
