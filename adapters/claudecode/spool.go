package claudecode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/runtime/redact"
)

// Spool keeps the events a hook could not deliver because thatch (its broker) was
// unreachable, so a tool call made while thatch is down is not lost: opencode's bridge
// catches up from opencode's own store, a hook has nothing to catch up from. Each hook
// that cannot deliver appends one file of its events, redacted as the journal redacts
// (rule 13: no secret reaches a disk), to Dir (0700; files 0600). A drainer (thatch
// serve at its start, and the next hook that gets through before its own events) sends
// the files in the order they were written, each claimed by a rename first so two
// drainers never send one twice; a file is removed once all its events are acknowledged.
// A resend is harmless: every event has a stable id, which JetStream's Msg-Id dedup and
// the runtime's apply (each event id at most once) both honour.
//
// The spool is bounded: at MaxFiles files or MaxBytes bytes, a hook's events are
// dropped (Append returns ErrSpoolFull, which the hook reports on standard error).
//
// A file with a line that cannot be decoded (written by hand, or damaged) is never retried
// forever nor deleted: its decodable events are sent, and the file is moved whole to
// Dir/rejected/ for a person to read, told to Rejected.
type Spool struct {
	Dir      string
	MaxFiles int   // default SpoolMaxFiles
	MaxBytes int64 // default SpoolMaxBytes
	// Rejected, when set, is told of each file moved to rejected/: its new path and what
	// was wrong with it.
	Rejected func(path string, err error)
}

// RejectedDir is where Drain moves the spool files of dir that cannot be decoded.
func RejectedDir(dir string) string { return filepath.Join(dir, "rejected") }

// Spool bounds: enough for days of tool calls of a thatch left stopped.
const (
	SpoolMaxFiles = 2000
	SpoolMaxBytes = 64 << 20
)

// SpoolDir is the spool of the data folder dataDir.
func SpoolDir(dataDir string) string { return filepath.Join(dataDir, "hook-spool") }

// ErrSpoolFull is Append's error when the spool holds its most.
var ErrSpoolFull = errors.New("the hook spool is full")

// Spooled is one event as it is published: its subject, id (the Msg-Id) and body.
type Spooled struct {
	Subject string          `json:"subject"`
	ID      string          `json:"id"`
	Body    json.RawMessage `json:"body"`
}

// claimStale is how long a claimed file may wait before another drainer takes it back:
// its drainer died mid-way (a hook killed at its budget).
const claimStale = time.Minute

func (s Spool) limits() (int, int64) {
	files, size := s.MaxFiles, s.MaxBytes
	if files <= 0 {
		files = SpoolMaxFiles
	}
	if size <= 0 {
		size = SpoolMaxBytes
	}
	return files, size
}

// Append writes evs, redacted, as one new spool file.
func (s Spool) Append(evs []Spooled) error {
	if len(evs) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for _, e := range evs {
		body, _ := redact.JSON(e.Body)
		if !json.Valid(body) { // not a JSON document: kept as a JSON string of its redacted text
			body, _ = json.Marshal(string(body))
		}
		subject, _ := redact.Text(e.Subject)
		line, err := json.Marshal(Spooled{Subject: subject, ID: e.ID, Body: body})
		if err != nil {
			return err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("make the hook spool: %w", err)
	}
	_ = os.Chmod(s.Dir, 0o700)
	maxFiles, maxBytes := s.limits()
	files, size, err := s.usage()
	if err != nil {
		return err
	}
	if files+1 > maxFiles || size+int64(buf.Len()) > maxBytes {
		return fmt.Errorf("%w (%d files, %d bytes; at most %d files, %d bytes): start thatch serve to deliver it", ErrSpoolFull, files, size, maxFiles, maxBytes)
	}
	name := fmt.Sprintf("%020d-%d.jsonl", time.Now().UnixNano(), os.Getpid())
	tmp, err := os.CreateTemp(s.Dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("write the hook spool: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("write the hook spool: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write the hook spool: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(s.Dir, name))
}

// Pending reports whether the spool holds events not yet delivered (or being delivered):
// a hook that finds it so spools its own events behind them, so they arrive in order.
func (s Spool) Pending() bool {
	files, _, err := s.usage()
	return err == nil && files > 0
}

// usage is the spool's count of files and bytes.
func (s Spool) usage() (int, int64, error) {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return 0, 0, fmt.Errorf("read the hook spool: %w", err)
	}
	files, size := 0, int64(0)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			files++
			size += fi.Size()
		}
	}
	return files, size, nil
}

// Drain sends the spool's events in order through publish, which returns once an event
// is acknowledged. It stops at the first failure, leaving that file (and the later ones)
// to the next drainer, and returns how many events it sent. A spool that does not exist
// is empty.
func (s Spool) Drain(ctx context.Context, publish func(ctx context.Context, e Spooled) error) (int, error) {
	unlock, ok, err := lockSpool(s.Dir)
	if err != nil || !ok {
		return 0, err // no spool, or another drainer holds it
	}
	defer unlock()
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return 0, err
	}
	var names []string
	for _, e := range ents {
		name := e.Name()
		if base, _, claimed := strings.Cut(name, ".claim-"); claimed {
			// A claim of a drainer that died mid-way: sent again (each event is
			// idempotent), in its place.
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > claimStale {
				if os.Rename(filepath.Join(s.Dir, name), filepath.Join(s.Dir, base)) == nil {
					names = append(names, base)
				}
			}
			continue
		}
		if strings.HasSuffix(name, ".jsonl") {
			names = append(names, name)
		}
	}
	sort.Strings(names) // the time they were written
	sent := 0
	for _, name := range names {
		if ctx.Err() != nil {
			return sent, ctx.Err()
		}
		path := filepath.Join(s.Dir, name)
		claim := path + ".claim-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := os.Rename(path, claim); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // another drainer took it
			}
			return sent, err
		}
		now := time.Now()
		_ = os.Chtimes(claim, now, now) // the claim's age, for claimStale
		n, bad, err := sendFile(ctx, claim, publish)
		sent += n
		if err != nil {
			_ = os.Rename(claim, path) // for the next drainer; what was sent is sent again, harmlessly
			return sent, err
		}
		if bad != nil {
			if err := s.reject(claim, name, bad); err != nil {
				return sent, err
			}
			continue
		}
		if err := os.Remove(claim); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// reject moves the claimed file claim, first named name, to the rejected folder, and says
// so to s.Rejected.
func (s Spool) reject(claim, name string, bad error) error {
	dir := RejectedDir(s.Dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("set aside the hook spool file %s, which %v: %w", name, bad, err)
	}
	to := filepath.Join(dir, name)
	if err := os.Rename(claim, to); err != nil {
		return fmt.Errorf("set aside the hook spool file %s, which %v: %w", name, bad, err)
	}
	if s.Rejected != nil {
		s.Rejected(to, bad)
	}
	return nil
}

// sendFile publishes the events of one spool file in order. bad says what is wrong with
// the lines it could not decode (nil when none), which it skips.
func sendFile(ctx context.Context, path string, publish func(context.Context, Spooled) error) (sent int, bad error, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	line, badLines := 0, 0
	for sc.Scan() {
		line++
		var e Spooled
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Subject == "" {
			if badLines++; bad == nil {
				if err == nil {
					err = errors.New("no subject")
				}
				bad = fmt.Errorf("line %d: %w", line, err)
			}
			continue
		}
		if err := publish(ctx, e); err != nil {
			return sent, nil, fmt.Errorf("deliver the hook spool's event %s: %w", e.ID, err)
		}
		sent++
	}
	if bad != nil {
		bad = fmt.Errorf("has %d of %d lines that are not spooled events (%w)", badLines, line, bad)
	}
	return sent, bad, sc.Err()
}
