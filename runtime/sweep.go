package runtime

import (
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// StrandKind is what the strand sweep does to one session.
type StrandKind string

const (
	StrandDelete StrandKind = "delete"
	StrandMove   StrandKind = "move"
	StrandSkip   StrandKind = "skip"
)

// StrandAction is one planned step of a strand sweep.
type StrandAction struct {
	Kind      StrandKind `json:"kind"`
	SessionID string     `json:"sessionID"`
	Directory string     `json:"directory,omitempty"` // move: the destination; otherwise the dead directory
	Reason    string     `json:"reason"`
}

// PlanStrandActions decides the strand sweep of one host (rule 8). A session whose
// directory exists is never touched (and left out of the plan); machinery in a dead
// directory is deleted; a top-level session in a dead directory is moved to its
// project's worktree when that exists and the host can move; task children and
// everything else are skipped with a reason. exists reports whether a directory exists.
func PlanStrandActions(rows []SessionInfo, exists func(string) bool, worktrees map[string]string, canMove bool) []StrandAction {
	var out []StrandAction
	for _, r := range rows {
		if r.Directory == "" || exists(r.Directory) {
			continue
		}
		a := StrandAction{Kind: StrandSkip, SessionID: r.ID, Directory: r.Directory}
		wt := worktrees[r.ProjectID]
		switch {
		case r.Title == ExtractionTitle:
			a.Kind, a.Reason = StrandDelete, "thatch machinery in a missing directory"
		case r.ParentID != "":
			a.Reason = "a task child: the host's own record of sub-agent work"
		case wt == "" || filepath.Clean(wt) == "/":
			// opencode's "global" project (directories outside a git history) reports "/".
			a.Reason = "no canonical worktree known for project " + quoteOr(r.ProjectID, "(none)")
		case filepath.Clean(wt) == filepath.Clean(r.Directory) || !exists(wt):
			a.Reason = "the project's worktree " + wt + " is missing too"
		case !canMove:
			a.Reason = "the host cannot move sessions"
		default:
			a.Kind, a.Directory, a.Reason = StrandMove, wt, "moved from missing "+r.Directory+" to the project's worktree"
		}
		out = append(out, a)
	}
	return out
}

func quoteOr(s, empty string) string {
	if s == "" {
		return empty
	}
	return s
}

// SweepApply hands a planned strand sweep of one host to the state owner, which records
// and performs it.
type SweepApply struct {
	Host    string
	Actions []StrandAction
}

func (SweepApply) input() {}

// sweepApply performs a strand sweep's plan: deletions and moves go to the outbox,
// skips are logged, one summary toast reports what was healed.
func (t *step) sweepApply(in SweepApply) {
	deleted, moved := 0, 0
	for _, a := range in.Actions {
		switch a.Kind {
		case StrandDelete:
			if sess := t.s.Sessions[a.SessionID]; sess != nil && sess.Kind == KindExtraction {
				t.end(sess, true)
			} else {
				t.call(Call{Host: in.Host, Op: OpDelete, SessionID: a.SessionID})
			}
			deleted++
		case StrandMove:
			if sess := t.s.Sessions[a.SessionID]; sess != nil {
				sess.Directory = a.Directory
				t.dirty(sess)
			}
			t.call(Call{Host: in.Host, Op: OpMove, SessionID: a.SessionID, Directory: a.Directory})
			moved++
		case StrandSkip:
			t.note(slog.LevelInfo, "stranded session left alone", "host", in.Host, "session", a.SessionID, "directory", a.Directory, "reason", a.Reason)
		}
	}
	if n := deleted + moved; n > 0 {
		t.count(&t.s.Counters.Healed, int64(n))
		t.note(slog.LevelInfo, "stranded sessions healed", "host", in.Host, "deleted", deleted, "moved", moved)
		t.toast(in.Host, "thatch", fmt.Sprintf("Healed %d stranded %s (%d deleted, %d moved)", n, plural(n, "session", "sessions"), deleted, moved), "info")
	}
}

// journalSweep drops the rows of sessions untouched for TTL or whose directory is gone,
// except those a host listed as resumed (rule 9). Machinery is finalized, not just
// forgotten, so no parent stays flagged and no child stays behind on the host. Then it
// forgets the hosts unheard for TTL that have no session left (forgetHosts).
func (t *step) journalSweep(tick Tick) {
	if t.TTL <= 0 {
		return
	}
	resumed := map[string]bool{}
	for _, h := range t.s.Hosts {
		for _, id := range h.Resumed {
			resumed[id] = true
		}
	}
	dropped := 0
	for _, sess := range t.s.sorted() {
		if t.s.Sessions[sess.ID] == nil || resumed[sess.ID] {
			continue // forgotten with its parent earlier in this sweep
		}
		exists, checked := tick.Exists[sess.Directory]
		gone := sess.Directory != "" && checked && !exists
		if !gone && t.now.Sub(sess.Touched) < t.TTL {
			continue
		}
		if sess.Extracting {
			continue // its extraction child goes first; the next sweep takes it
		}
		dropped++
		t.end(sess, true)
	}
	for id, at := range t.s.Gone {
		if t.now.UnixMilli()-at >= t.TTL.Milliseconds() {
			delete(t.s.Gone, id)
			t.fx.Gone[id] = true
		}
	}
	if dropped > 0 {
		t.count(&t.s.Counters.Swept, int64(dropped))
		t.note(slog.LevelInfo, "journal sweep dropped stale session rows", "sessions", dropped, "ttl", t.TTL.String())
	}
	t.forgetHosts()
}

// forgetHosts drops the records of hosts not heard from for TTL that have no session
// left, so hosts that come and go (a bridge per opencode run) do not pile up: each
// costs a row, a status line and the driver's bookkeeping. A host heard from again is
// recorded anew, as v1 until its next hello (any host's first event does the same). A
// record from before thatch kept Heard starts its clock here.
func (t *step) forgetHosts() {
	now := t.now.UnixMilli()
	var forgotten []string
	for _, id := range slices.Sorted(maps.Keys(t.s.Hosts)) {
		h := t.s.Hosts[id]
		switch {
		case h.Heard == 0:
			h.Heard = now
			t.fx.Hosts[id] = true
		case now-h.Heard < t.TTL.Milliseconds() || t.s.hasSessions(id):
		default:
			delete(t.s.Hosts, id)
			t.fx.Hosts[id] = true // a host not in State is deleted from the journal
			forgotten = append(forgotten, id)
		}
	}
	if len(forgotten) > 0 {
		ids := strings.Join(forgotten[:min(len(forgotten), 10)], ",")
		if len(forgotten) > 10 {
			ids += ",…"
		}
		t.note(slog.LevelInfo, "journal sweep forgot hosts not heard from that have no session left", "hosts", len(forgotten),
			"ids", ids, "ttl", t.TTL.String())
	}
}

// Directories returns the distinct directories of the tracked sessions, so the driver can
// tell the journal sweep which exist.
func Directories(s *State) []string {
	seen := map[string]bool{}
	var out []string
	for _, sess := range s.Sessions {
		if sess.Directory != "" && !seen[sess.Directory] {
			seen[sess.Directory] = true
			out = append(out, sess.Directory)
		}
	}
	return out
}

// SweepTargets returns the hosts a strand sweep visits: the one named, or every online
// host, with whether each can move sessions.
func SweepTargets(s *State, hostID string) []Host {
	var out []Host
	for _, h := range s.Hosts {
		if (hostID == "" && h.Online) || h.ID == hostID {
			out = append(out, *h)
		}
	}
	return out
}
