package claudecode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func spooled(ids ...string) []Spooled {
	var out []Spooled
	for _, id := range ids {
		out = append(out, Spooled{Subject: "opencode.cc-x.event.tool.execute.after", ID: id, Body: []byte(`{"id":"` + id + `"}`)})
	}
	return out
}

// TestSpool: the spool is sent in the order it was written, each file once; a failure
// leaves the rest (its file whole) to the next drainer; a claim whose drainer died is
// taken back; a full spool refuses more; a secret never reaches its files.
func TestSpool(t *testing.T) {
	s := Spool{Dir: filepath.Join(t.TempDir(), "spool"), MaxFiles: 3}
	var sent []string
	ok := func(_ context.Context, e Spooled) error { sent = append(sent, e.ID); return nil }
	if n, err := s.Drain(context.Background(), ok); n != 0 || err != nil {
		t.Fatalf("draining no spool: %d %v", n, err)
	}
	secret := "ghp_" + strings.Repeat("aB3dE6gH9j", 4)[:36]
	must(t, s.Append(spooled("a1", "a2")))
	must(t, s.Append([]Spooled{{Subject: "opencode.cc-x.event.tool.execute.after", ID: "b1", Body: []byte(`{"output":"token ` + secret + `"}`)}}))
	must(t, s.Append(spooled("c1")))
	if err := s.Append(spooled("d1")); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("a fourth file in a spool of 3: %v, want ErrSpoolFull", err)
	}
	files, _ := filepath.Glob(filepath.Join(s.Dir, "*.jsonl"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if strings.Contains(string(data), secret) {
			t.Fatalf("%s holds the secret:\n%s", f, data)
		}
	}

	// The second file fails: the first is sent and gone, the second stays whole.
	failB := func(ctx context.Context, e Spooled) error {
		if e.ID == "b1" {
			return errors.New("broker away")
		}
		return ok(ctx, e)
	}
	if n, err := s.Drain(context.Background(), failB); n != 2 || err == nil {
		t.Fatalf("a drain failing at b1: %d %v", n, err)
	}
	if !s.Pending() {
		t.Fatal("the spool is empty after a failed drain")
	}
	// A drainer died holding c1's file: its claim is taken back once stale.
	files, _ = filepath.Glob(filepath.Join(s.Dir, "*.jsonl"))
	last := files[len(files)-1]
	claim := last + ".claim-1-x"
	must(t, os.Rename(last, claim))
	old := time.Now().Add(-2 * claimStale)
	must(t, os.Chtimes(claim, old, old))
	if n, err := s.Drain(context.Background(), ok); n != 2 || err != nil {
		t.Fatalf("the second drain: %d %v", n, err)
	}
	if want := []string{"a1", "a2", "b1", "c1"}; !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
	if s.Pending() {
		t.Fatal("the spool is not empty after a full drain")
	}
}

// TestSpoolRejectsWhatItCannotDecode: a spool file with a line that is not a spooled event
// has its good events sent and is moved whole to rejected/, told to Rejected; it neither
// blocks the files after it nor comes back at the next drain.
func TestSpoolRejectsWhatItCannotDecode(t *testing.T) {
	var told []string
	s := Spool{Dir: filepath.Join(t.TempDir(), "spool"), Rejected: func(path string, err error) {
		told = append(told, filepath.Base(path)+": "+err.Error())
	}}
	must(t, s.Append(spooled("a1")))
	files, _ := filepath.Glob(filepath.Join(s.Dir, "*.jsonl"))
	damaged := filepath.Join(s.Dir, strings.Replace(filepath.Base(files[0]), "-", "1-", 1)) // after a1's file
	good, err := os.ReadFile(files[0])
	must(t, err)
	content := string(good) + "{\"subject\":\"opencode.cc-x.ev\n" + strings.Replace(string(good), "a1", "b1", 1)
	must(t, os.WriteFile(damaged, []byte(content), 0o600))
	must(t, os.WriteFile(filepath.Join(s.Dir, "99999999999999999999-1.jsonl"), []byte(strings.Replace(string(good), "a1", "c1", 1)), 0o600))

	var sent []string
	ok := func(_ context.Context, e Spooled) error { sent = append(sent, e.ID); return nil }
	if n, err := s.Drain(context.Background(), ok); n != 4 || err != nil {
		t.Fatalf("drain: %d %v, want 4 events sent", n, err)
	}
	if want := []string{"a1", "a1", "b1", "c1"}; !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
	kept, err := os.ReadFile(filepath.Join(RejectedDir(s.Dir), filepath.Base(damaged)))
	if err != nil || string(kept) != content {
		t.Fatalf("the damaged file in rejected/: %q %v, want it whole", kept, err)
	}
	if len(told) != 1 || !strings.Contains(told[0], filepath.Base(damaged)) || !strings.Contains(told[0], "1 of 3 lines") || !strings.Contains(told[0], "line 2") {
		t.Fatalf("told %q, want the damaged file named with its bad line", told)
	}
	if s.Pending() {
		t.Fatal("the spool is pending after its damaged file was set aside")
	}
	sent = nil
	if n, err := s.Drain(context.Background(), ok); n != 0 || err != nil || len(sent) != 0 {
		t.Fatalf("a second drain: %d %v %v, want nothing sent again", n, err, sent)
	}
}
