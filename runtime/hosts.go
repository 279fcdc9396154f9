package runtime

import (
	"log/slog"
	"strings"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Hosts: host.hello and the boots it begins, the tools a host has not loaded, Host-Seq
// continuity and the resync after a gap.

// host returns the host record for id, creating a v1 record for a host that never said hello.
func (t *step) host(id string) *Host {
	h := t.s.Hosts[id]
	if h == nil {
		h = &Host{ID: id, API: "v1"}
		t.s.Hosts[id] = h
		t.fx.Hosts[id] = true
	}
	return h
}

// heardEvery is how stale a host's Heard may get before an event refreshes it: the TTL
// it serves counts in days, and a host row written at every event would cost a write per
// batch.
const heardEvery = time.Minute

// heard records that an event of h was applied now.
func (t *step) heard(h *Host) {
	if now := t.now.UnixMilli(); now-h.Heard >= heardEvery.Milliseconds() || now < h.Heard {
		h.Heard = now
		t.fx.Hosts[h.ID] = true
	}
}

// hello handles a host.hello: the host's record, its restart when the bootID is new, and
// the tools it lacks. A hello of the same boot (the opencode bridge says it again when the
// tools it lacks change) restarts nothing: sessions keep their status, and its Host-Seq
// counts like any event's.
func (t *step) hello(h *Host, ev Event) {
	hi := ev.Hello
	restarted := h.BootID != hi.BootID
	if !restarted {
		t.hostSeq(h, ev)
	}
	h.API, h.Version, h.BootID = hi.API, hi.Version, hi.BootID
	h.Directory, h.Worktree, h.ProjectID = hi.Directory, hi.Worktree, hi.ProjectID
	h.Caps, h.Resumed, h.Online = hi.Caps, hi.Resumed, true
	h.SmallModel = ""
	if _, _, ok := ParseModel(hi.SmallModel); ok {
		h.SmallModel = hi.SmallModel
	} else if hi.SmallModel != "" {
		t.note(slog.LevelWarn, "host.hello names a small model that is not provider/model; extraction uses the host's default", "host", h.ID, "small_model", cut(hi.SmallModel, 80))
	}
	t.fx.Hosts[h.ID] = true
	t.fx.Hellos = append(t.fx.Hellos, SaidHello{Host: h.ID, NewBoot: restarted})
	if restarted {
		t.restart(h, ev)
	}
	t.helloTools(h, hi.MissingTools)
}

// restart handles a hello that began a new boot (rule 7): it finalizes the host's
// extraction children (their parents' extractions end with them) and resets what the old
// boot was doing in its sessions: status, compaction, wrap-up, an extraction child not
// named yet. Entries stay.
func (t *step) restart(h *Host, ev Event) {
	h.Seq = ev.HostSeq // the first event of a boot sets the baseline
	h.ToolsWarned = false
	for _, sess := range t.s.HostSessions(h.ID) { // the host's only: a hello costs what its host has
		if t.s.Sessions[sess.ID] == nil {
			continue // an extraction child finalized with its parent's earlier in this loop
		}
		if sess.Kind == KindExtraction {
			t.endWith(sess, true, "host_restarted")
			continue
		}
		// A status from the previous boot is stale either way: the first idle of the new
		// boot must count.
		creating := sess.Extraction() == ExtractionCreating
		if sess.Status != StatusUnknown || sess.Compacting || sess.WrapUpPhase() != WrapUpNone || creating {
			sess.Status, sess.Compacting = StatusUnknown, false
			sess.endWrapUp()
			if creating {
				sess.stopExtraction() // a child the old boot's create names later is a stray
			}
			t.dirty(sess)
		}
	}
	t.note(slog.LevelInfo, "host started", "host", h.ID, "api", h.API, "boot_id", h.BootID)
}

// helloTools records the tools a hello says the host lacks. While any is missing no
// extraction starts for the host's sessions (an extraction child could not call them):
// each hello with missing tools says so in one error line, and a hello without them lets
// the next idles extract again.
func (t *step) helloTools(h *Host, missing []string) {
	had := len(h.MissingTools) > 0
	h.MissingTools = boundNames(missing)
	switch {
	case len(h.MissingTools) > 0:
		t.noteToolsMissing(h)
	case had:
		t.note(slog.LevelInfo, "the host has thatch's tools again: extraction resumes at its sessions' next idle", "host", h.ID)
	}
}

// boundNames keeps a host's list of tool names to a size worth holding: 16 names of 64
// characters at most, in a fresh slice; nil when empty.
func boundNames(names []string) []string {
	var out []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" && len(out) < 16 {
			out = append(out, cut(n, 64))
		}
	}
	return out
}

func (t *step) noteToolsMissing(h *Host) {
	t.note(slog.LevelError, "the host has not loaded thatch's plugin: its sessions get no memories and no extraction starts (their entries stay pending); run thatch install if you have not, then restart opencode or POST /instance/dispose to it so it loads the plugin",
		"host", h.ID, "missing_tools", strings.Join(h.MissingTools, ","))
}

// toolsMissing is the check before an extraction starts: while the session's host lacks
// thatch's tools, no child is created and the entries stay pending. The first refusal of
// a host boot says so in a warning toast (the error line came with the hello, or with the
// refused create).
func (t *step) toolsMissing(sess *Session) bool {
	h := t.s.Hosts[sess.HostID]
	if h == nil || len(h.MissingTools) == 0 {
		return false
	}
	t.warnTools(h)
	return true
}

// warnTools sends the missing tools' warning toast, once per host boot.
func (t *step) warnTools(h *Host) {
	if h.ToolsWarned {
		return
	}
	h.ToolsWarned = true
	t.fx.Hosts[h.ID] = true
	t.toast(h.ID, "thatch", "opencode has not loaded thatch's plugin: no memories are given or extracted (nothing is lost). Run thatch install if you have not, then restart opencode so it loads the plugin.", "warning")
}

// refusedTools handles a session.create refused with ToolsMissingError: the host lost
// thatch's tools after its hello said it had them. They are marked missing until the next
// hello, with the same error line as a hello's (once) and the boot's toast.
func (t *step) refusedTools(host string, err *HostError) {
	h := t.host(host)
	if len(h.MissingTools) == 0 {
		h.MissingTools = missingFrom(err.Message)
		t.fx.Hosts[h.ID] = true
		t.noteToolsMissing(h)
	}
	t.warnTools(h)
}

// missingFrom reads the tool names out of a ToolsMissingError's message, "… (missing
// tools: a, b) …" as the opencode bridge writes it; any other message names the two
// extraction tools, which a child needs in any case.
func missingFrom(msg string) []string {
	if _, rest, ok := strings.Cut(msg, "missing tools: "); ok {
		if list, _, ok := strings.Cut(rest, ")"); ok {
			if names := boundNames(strings.Split(list, ",")); len(names) > 0 {
				return names
			}
		}
	}
	return []string{ToolPayload, ToolDone}
}

// hostSeq checks Host-Seq continuity within a boot (rule 10).
func (t *step) hostSeq(h *Host, ev Event) {
	switch {
	case ev.HostSeq <= 0:
		return
	case h.Seq == 0 || ev.HostSeq == h.Seq+1:
		h.Seq = ev.HostSeq
	case ev.HostSeq > h.Seq+1:
		t.count(&t.s.Counters.Gaps, 1)
		t.note(slog.LevelWarn, "events lost upstream of the stream: resyncing the host's sessions",
			"host", h.ID, "missing_from", h.Seq+1, "missing_to", ev.HostSeq-1)
		t.call(Call{Host: h.ID, Op: OpList, Purpose: PurposeResync})
		h.Seq = ev.HostSeq
	default:
		return // a redelivery or a reordering: already counted
	}
	t.fx.Hosts[h.ID] = true
}

// resync refreshes what thatch knows of a host's sessions from session.list (rule 10).
// A session the list omits is never deleted. It costs what the list holds: each row is
// looked up, no other session is visited.
func (t *step) resync(host string, res Result) {
	if res.Err != nil {
		t.note(slog.LevelWarn, "resync failed", "host", host, "error", res.Err.Error())
		return
	}
	for _, info := range res.Sessions {
		sess := t.s.Sessions[info.ID]
		if sess == nil || sess.HostID != host {
			continue
		}
		if sess.Title != info.Title || sess.Directory != info.Directory || (info.ParentID != "" && sess.ParentID == "") {
			t.upsert(Event{Type: protocol.EventSessionUpdated, HostID: host, SessionID: info.ID, Info: &info})
		}
	}
}
