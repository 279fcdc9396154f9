package runtime

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// ExtractionTitle is the exact title of the child sessions thatch creates to extract memories.
const ExtractionTitle = "thatch-extraction"

// Kind says what a session is to thatch.
type Kind string

const (
	KindTop        Kind = "top"        // a session without a parent
	KindExtraction Kind = "extraction" // a child thatch created, titled ExtractionTitle
	KindTask       Kind = "task"       // any other child: a sub-agent the host spawned
)

// Status is the last known run state of a session. A retrying session counts as busy.
type Status string

const (
	StatusUnknown Status = "unknown"
	StatusIdle    Status = "idle"
	StatusBusy    Status = "busy"
)

// WrapUp is an armed wrap-up command.
type WrapUp string

const (
	WrapNone    WrapUp = ""
	WrapCompact WrapUp = "compact"
	WrapExit    WrapUp = "exit"
)

// Token is the greenlight token the model ends its reply with when the wrap-up may proceed.
func (w WrapUp) Token() string {
	switch w {
	case WrapCompact:
		return "THATCH_COMPACT_READY"
	case WrapExit:
		return "THATCH_EXIT_READY"
	}
	return ""
}

// Command is the slash command (without its leading slash) that arms w.
func (w WrapUp) Command() string { return "thatch/" + string(w) }

// CommandOn is Command as the host hostID names it to its user: Claude Code names the
// custom command of ~/.claude/commands/thatch/compact.md thatch:compact.
func (w WrapUp) CommandOn(hostID string) string {
	if strings.HasPrefix(hostID, protocol.ClaudeCodeHostPrefix) {
		return "thatch:" + string(w)
	}
	return w.Command()
}

// State is everything thatch knows. Entry bodies are not here: they stay in the journal,
// so memory grows with the number of entries, not with their size.
type State struct {
	Hosts    map[string]*Host
	Sessions map[string]*Session
	// Gone remembers sessions thatch forgot (deleted, finished machinery) with the Unix
	// milliseconds of their end, so a late or redelivered event naming one cannot bring
	// it back as a zombie. The journal sweep drops them after the TTL.
	Gone     map[string]int64
	Counters Counters

	// idx indexes Sessions by host and by parent and tallies hosts, sessions and entries,
	// so that the work of one host (a hello, a listing) or of one session's children costs
	// what that host or session has, and status costs no pass over anything. It is not
	// persisted: Reindex (the journal's Load calls it), else its first use, builds it from
	// Hosts and Sessions, and from then on only Step may change them or the entries.
	idx *index
}

// NewState returns an empty state.
func NewState() *State {
	return &State{Hosts: map[string]*Host{}, Sessions: map[string]*Session{}, Gone: map[string]int64{}}
}

// Counters are the status figures and the hygiene signals that outlive a restart.
// Its JSON names are the journal's on-disk format (journal.Store stores it as JSON):
// never rename them; a renamed field would silently load as its zero value.
type Counters struct {
	Applied  int64 `json:"Applied"`            // events of known types applied
	Rejected int64 `json:"Rejected"`           // bad input acknowledged and dead-lettered
	Gaps     int64 `json:"Gaps"`               // Host-Seq gaps detected
	Redacted int64 `json:"Redacted,omitempty"` // secrets and private blocks redacted from what thatch journals (rule 13)

	// Hygiene signals since the last session-start reminder.
	StaleRequeued int64 `json:"StaleRequeued"` // accepted entries put back by the stale-claim rule
	Healed        int64 `json:"Healed"`        // stranded sessions deleted or moved
	Swept         int64 `json:"Swept"`         // sessions whose journal rows the journal sweep dropped

	// Extraction spending of the UTC day Day (rule 14), mirrored from the journal's ledger
	// in the same commits: the daily budget is decided from it. Warned is the last day the
	// budget's toast was sent.
	Day       string `json:"Day,omitempty"`
	DayTokens int64  `json:"DayTokens,omitempty"`
	Warned    string `json:"Warned,omitempty"`
	// Trivial counts the entries dropped because nothing could be learned from them.
	Trivial int64 `json:"Trivial,omitempty"`
	// Stream is the identity (creation time) of the event stream the consumer position
	// and the sessions' Seq watermarks count in (rule 12).
	Stream string `json:"Stream,omitempty"`
	// LastExtractionFailure is the last extraction child that failed (its host's
	// session.error), shown by status until another fails, as history once an extraction
	// succeeded after it (LastExtractionSuccess). Never changed in place: a
	// failure replaces it whole, so a copy of the counters may share it.
	LastExtractionFailure *ExtractionFailure `json:"LastExtractionFailure,omitempty"`
	// LastExtractionSuccess is when an extraction last completed entries (Unix
	// milliseconds, 0 before any): status tells a failure since fixed from a current one.
	LastExtractionSuccess int64 `json:"LastExtractionSuccess,omitempty"`
}

// ExtractionFailure is what status says of a failed extraction: the host, the session
// whose entries it was extracting, the child, when, and the host's message (redacted).
type ExtractionFailure struct {
	Host    string    `json:"host"`
	Session string    `json:"session"`
	Child   string    `json:"child"`
	At      time.Time `json:"at"`
	Message string    `json:"message"`
}

// Host is one host that said hello.
// Its JSON names are the journal's on-disk format (journal.Store stores it as JSON):
// never rename them; a renamed field would silently load as its zero value.
type Host struct {
	ID        string       `json:"ID"`
	API       string       `json:"API"` // "v1" or "v2"; a host that never said hello is treated as v1
	Version   string       `json:"Version"`
	BootID    string       `json:"BootID"`
	Directory string       `json:"Directory"`
	Worktree  string       `json:"Worktree"`
	ProjectID string       `json:"ProjectID"`
	Caps      Capabilities `json:"Caps"`
	Resumed   []string     `json:"Resumed"` // sessions the host resumed at start: their rows are always kept
	Online    bool         `json:"Online"`
	Seq       int64        `json:"Seq"` // last Host-Seq seen in this boot; 0 before the baseline
	// SmallModel is the host's model for cheap background work, "provider/model" (an
	// extension of host.hello): extraction children run on it.
	SmallModel string `json:"SmallModel,omitempty"`
	// MissingTools are thatch's tools the host has not loaded (an extension of host.hello,
	// or learned from a session.create refused with ToolsMissingError): while it is not
	// empty, no extraction starts for the host's sessions. Each hello sets it.
	MissingTools []string `json:"MissingTools,omitempty"`
	// ToolsWarned: the missing tools' toast was sent in this boot (it goes once per boot).
	ToolsWarned bool `json:"ToolsWarned,omitempty"`
	// Heard is when thatch last applied an event of the host (Unix milliseconds, kept to
	// the minute): the journal sweep forgets a host without sessions unheard for the TTL.
	// 0 on rows from before thatch kept it; the next journal sweep starts their clock.
	Heard int64 `json:"Heard,omitempty"`
}

// Capabilities are what a host said it can do in its hello.
// Its JSON names are the journal's on-disk format (journal.Store stores it as JSON):
// never rename them; a renamed field would silently load as its zero value.
type Capabilities struct {
	TUI     bool `json:"tui"`
	Compact bool `json:"compact"`
	Move    bool `json:"move"`
	List    bool `json:"list"`
	// Context (an extension): the host asks thatch for the session-start text itself,
	// through session.context, and puts it into the session's first model request (the
	// opencode plugin does, in its system-prompt hook). thatch then sends no reminder
	// prompt, which would land after the user's first message.
	Context bool `json:"context,omitempty"`
}

// Session is one host session thatch tracks.
// Its JSON names are the journal's on-disk format (journal.Store stores it as JSON):
// never rename them; a renamed field would silently load as its zero value.
type Session struct {
	ID        string `json:"ID"`
	HostID    string `json:"HostID"`
	ParentID  string `json:"ParentID"`
	Kind      Kind   `json:"Kind"`
	Title     string `json:"Title"`
	Directory string `json:"Directory"`
	ProjectID string `json:"ProjectID"`
	Status    Status `json:"Status"`

	// Extracting and Child hold the session's ExtractionPhase, WrapUp and Resolving its
	// WrapUpPhase, Resolved the wrap-up's expected echo: phase.go alone changes them and
	// reads them together. The flags come after the strings, together, so that they share
	// one word instead of a word each: a State may hold 100,000 sessions, each of them
	// a Session. The JSON's order follows; readers go by name.
	Child      string `json:"Child"`      // top: the running extraction child, once the host named it
	WrapUp     WrapUp `json:"WrapUp"`     // top: the armed wrap-up command
	Resolved   WrapUp `json:"Resolved"`   // top: the last wrap-up resolved at an idle, so command.executed does not resolve it twice
	Reminded   bool   `json:"Reminded"`   // top: the session-start reminder was sent
	Extracting bool   `json:"Extracting"` // top: an extraction child is being created or is running
	Compacting bool   `json:"Compacting"` // the host is compacting it: a greenlit /thatch/compact, or the host's own compaction
	Resolving  bool   `json:"Resolving"`  // top: the armed wrap-up's messages were asked for; the idle waits for them
	Exited     bool   `json:"Exited"`     // left the live directory through a greenlit /thatch/exit; busy again brings it back
	// WroteThrough: the extraction child called a memory tool that writes, so Wrote, not
	// Metrics, is what it wrote.
	WroteThrough bool `json:"WroteThrough,omitempty"`
	// Refused (top) is the last wrap-up command that did not proceed, until another is
	// armed or one is greenlit: thatch sessions and the page show it. A Refusal is never
	// changed once made (the views share it): a new one replaces it.
	Refused *Refusal `json:"Refused,omitempty"`

	Metrics Metrics `json:"Metrics"` // child: what it reported with thatch_extraction_done
	Wrote   Metrics `json:"Wrote"`   // extraction child: its effective writes through the memory tools, as thatch counted them
	// Completed: the entries it completed with thatch_extraction_done (the ledger counts
	// an extraction child's).
	Completed int `json:"Completed,omitempty"`
	// Failed (top) counts the extractions that failed since one last completed entries;
	// RetryAt is when the last failure's retry is due (Unix milliseconds, 0: none), see
	// retry.go.
	Failed   int32    `json:"Failed,omitempty"`
	RetryAt  int64    `json:"RetryAt,omitempty"`
	Snapshot []string `json:"Snapshot"` // child: the parent's pending entry ids when it was created (recovery data only)
	Entries  []Entry  `json:"-"`        // top: journaled entries, oldest first (rows of their own)

	Seq     uint64    `json:"Seq"`     // highest stream sequence applied to this session
	Touched time.Time `json:"Touched"` // last event or tool call that concerned it
}

// Refusal is a wrap-up command that did not proceed (rule 6): which, why, and when.
// Its JSON names are the journal's on-disk format (it is stored in its Session's JSON).
type Refusal struct {
	Command WrapUp    `json:"command"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// Metrics are an extraction child's report of the memories it wrote.
// Its JSON names are the journal's on-disk format (journal.Store stores it as JSON):
// never rename them; a renamed field would silently load as its zero value.
type Metrics struct {
	New     int64 `json:"new"`
	Updated int64 `json:"updated"`
	Deleted int64 `json:"deleted"`
}

// Total is the number of memories written.
func (m Metrics) Total() int64 { return m.New + m.Updated + m.Deleted }

// Entry is one buffered tool interaction of a top-level session. It is pending until a
// session claims it. A State may hold a million entries (the rehydrate figure), so an Entry
// is kept to a few words besides its id: what never changes after the insert but the size (the tool,
// whether it is trivial) is an index into a table of such pairs, and the claim is a pointer
// to a record all the entries one claim took share. Their methods read them.
type Entry struct {
	ID    string // EntryID: the callID, qualified by the session when a descendant made the call
	claim *Claim // nil while pending
	Size  int32  // characters it takes in an extraction payload
	kind  uint32 // its tool and triviality: entryKinds.list[kind]
}

// NewEntry returns a pending entry.
func NewEntry(id, tool string, size int32, trivial bool) Entry {
	return Entry{ID: id, Size: size, kind: internKind(entryKind{tool, trivial})}
}

// Tool is the tool that made the call.
func (e Entry) Tool() string { return e.kindOf().tool }

// Trivial reports whether nothing can be learned from e (TrivialEntry).
func (e Entry) Trivial() bool { return e.kindOf().trivial }

// Accepted reports whether a session claimed e.
func (e Entry) Accepted() bool { return e.claim != nil }

// Claimant is the session that claimed e, "" while e is pending.
func (e Entry) Claimant() string {
	if e.claim == nil {
		return ""
	}
	return e.claim.claimant
}

// ClaimedAt is when e was claimed (Unix milliseconds), 0 while e is pending.
func (e Entry) ClaimedAt() int64 {
	if e.claim == nil {
		return 0
	}
	return e.claim.at
}

// MarshalJSON writes e as the struct of exported fields it was, for what compares states
// by their JSON (the tests).
func (e Entry) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID, Tool, Claimant string
		ClaimedAt          int64
		Size               int32
		Trivial            bool
	}{e.ID, e.Tool(), e.Claimant(), e.ClaimedAt(), e.Size, e.Trivial()})
}

// WithClaim returns e claimed by c, or pending when c is nil.
func (e Entry) WithClaim(c *Claim) Entry {
	e.claim = c
	return e
}

// Claim is a session's claim on entries: which session, and when (Unix milliseconds). The
// entries one claim took share it; it never changes (an entry released or claimed again
// gets another), so sharing it is safe.
type Claim struct {
	claimant string
	at       int64
}

// NewClaim returns claimant's claim at at, or nil (pending) when claimant is "".
func NewClaim(claimant string, at int64) *Claim {
	if claimant == "" {
		return nil
	}
	return &Claim{claimant, at}
}

// entryKind is what an entry holds of its tool call besides its id and size.
type entryKind struct {
	tool    string
	trivial bool
}

// entryKinds interns the entryKinds of the process's entries, shared by every State so that
// an Entry's accessors need none. The tools are the hosts' (a few dozen names); the table
// only grows, so it is bounded: past maxEntryKinds pairs, a new tool's entries read as tool
// "other" (the journal keeps the real name; nothing decides by it but the trivial flag,
// which is kept). Readers load the list without a lock; a new pair is appended under the
// lock and the longer list published.
var entryKinds = struct {
	sync.Mutex
	list  atomic.Pointer[[]entryKind]
	index map[entryKind]uint32
}{index: map[entryKind]uint32{}}

// maxEntryKinds bounds entryKinds.
const maxEntryKinds = 1 << 16

func init() { internKind(entryKind{}) } // kind 0: the zero Entry's

func internKind(k entryKind) uint32 {
	entryKinds.Lock()
	defer entryKinds.Unlock()
	if i, ok := entryKinds.index[k]; ok {
		return i
	}
	var list []entryKind
	if l := entryKinds.list.Load(); l != nil {
		list = *l
	}
	if len(list) >= maxEntryKinds-2 && k.tool != "other" {
		k.tool = "other"
		if i, ok := entryKinds.index[k]; ok {
			return i
		}
	}
	k.tool = strings.Clone(k.tool) // kept for good: not a slice of something bigger
	i := uint32(len(list))
	list = append(list, k) // readers index below their own length: the shared array is safe
	entryKinds.list.Store(&list)
	entryKinds.index[k] = i
	return i
}

func (e Entry) kindOf() entryKind { return (*entryKinds.list.Load())[e.kind] }

// Root returns the top-level session whose entries id's work belongs to: id itself for a
// top-level session, its nearest top-level ancestor for a child. It returns "" when the
// chain is broken or loops.
func (s *State) Root(id string) string {
	for hops := 0; hops < 64; hops++ {
		sess := s.Sessions[id]
		if sess == nil {
			return ""
		}
		if sess.ParentID == "" {
			return id
		}
		id = sess.ParentID
	}
	return ""
}

// Pending counts s's entries that no session claimed.
func (s *Session) Pending() int {
	n := 0
	for _, e := range s.Entries {
		if !e.Accepted() {
			n++
		}
	}
	return n
}

// Claimed returns the ids of the entries of s claimed by claimant, oldest first.
func (s *Session) Claimed(claimant string) []string {
	var ids []string
	for _, e := range s.Entries {
		if e.Claimant() == claimant {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// index is State's derived lookup: sessions by host and by parent, and the figures of
// status. Every change of Sessions goes through State.add, State.drop and State.setParent;
// every change of a session's entries or exit marks it dirty, and every change of a host
// marks it dirty: Step recounts what it marked.
type index struct {
	byHost   map[string]map[string]*Session
	byParent map[string]map[string]*Session
	counted  map[string]tally // what total holds of each session
	total    tally
	online   map[string]bool     // hosts online
	missing  map[string]bool     // hosts online that lack thatch's tools
	retrying map[string]*Session // sessions with a retry scheduled (RetryAt set)
}

// tally is what status counts of sessions: live ones (not exited) and their entries.
type tally struct {
	Live, Pending, Accepted int
}

func (a tally) sub(b tally) tally {
	return tally{a.Live - b.Live, a.Pending - b.Pending, a.Accepted - b.Accepted}
}

func (a tally) add(b tally) tally {
	return tally{a.Live + b.Live, a.Pending + b.Pending, a.Accepted + b.Accepted}
}

func newIndex() *index {
	return &index{byHost: map[string]map[string]*Session{}, byParent: map[string]map[string]*Session{}, counted: map[string]tally{},
		online: map[string]bool{}, missing: map[string]bool{}, retrying: map[string]*Session{}}
}

// tallyOf counts one session; a nil one counts nothing.
func tallyOf(sess *Session) tally {
	var t tally
	if sess == nil {
		return t
	}
	if !sess.Exited {
		t.Live = 1
	}
	for _, e := range sess.Entries {
		if e.Accepted() {
			t.Accepted++
		} else {
			t.Pending++
		}
	}
	return t
}

func link(m map[string]map[string]*Session, key string, sess *Session) {
	set := m[key]
	if set == nil {
		set = map[string]*Session{}
		m[key] = set
	}
	set[sess.ID] = sess
}

func unlink(m map[string]map[string]*Session, key, id string) {
	if set := m[key]; set != nil {
		delete(set, id)
		if len(set) == 0 {
			delete(m, key)
		}
	}
}

// Reindex rebuilds the index from Hosts and Sessions, as after a load: a full scan.
// Its maps are sized before they are filled: for a large state, growing them one
// doubling at a time makes more garbage than they hold.
func (s *State) Reindex() {
	x := newIndex()
	for id, h := range s.Hosts {
		x.countHost(id, h)
	}
	perHost := map[string]int{}
	for _, sess := range s.Sessions {
		perHost[sess.HostID]++
	}
	for host, n := range perHost {
		x.byHost[host] = make(map[string]*Session, n)
	}
	x.counted = make(map[string]tally, len(s.Sessions))
	for _, sess := range s.Sessions {
		link(x.byHost, sess.HostID, sess)
		if sess.ParentID != "" {
			link(x.byParent, sess.ParentID, sess)
		}
		if t := tallyOf(sess); t != (tally{}) {
			x.counted[sess.ID] = t
			x.total = x.total.add(t)
		}
		if sess.RetryAt != 0 {
			x.retrying[sess.ID] = sess
		}
	}
	s.idx = x
}

// index returns the index, building it when the state was made without one.
func (s *State) index() *index {
	if s.idx == nil {
		s.Reindex()
	}
	return s.idx
}

// add records a new session.
func (s *State) add(sess *Session) {
	s.Sessions[sess.ID] = sess
	if x := s.idx; x != nil {
		link(x.byHost, sess.HostID, sess)
		if sess.ParentID != "" {
			link(x.byParent, sess.ParentID, sess)
		}
	}
}

// drop forgets a session; its tally goes with the recount of the Step (it is dirty).
func (s *State) drop(sess *Session) {
	delete(s.Sessions, sess.ID)
	if x := s.idx; x != nil {
		unlink(x.byHost, sess.HostID, sess.ID)
		if sess.ParentID != "" {
			unlink(x.byParent, sess.ParentID, sess.ID)
		}
	}
}

// setParent makes sess a child of parent.
func (s *State) setParent(sess *Session, parent string) {
	if sess.ParentID == parent {
		return
	}
	if x := s.idx; x != nil {
		if sess.ParentID != "" {
			unlink(x.byParent, sess.ParentID, sess.ID)
		}
		link(x.byParent, parent, sess)
	}
	sess.ParentID = parent
}

// countHost records whether host id (h, nil when forgotten) is online and lacks tools.
func (x *index) countHost(id string, h *Host) {
	online := h != nil && h.Online
	set := func(m map[string]bool, on bool) {
		if on {
			m[id] = true
		} else {
			delete(m, id)
		}
	}
	set(x.online, online)
	set(x.missing, online && len(h.MissingTools) > 0)
}

// recount brings the tally up to date for what a Step changed: the sessions and hosts it
// marked dirty (every change of a session's Exited, and of a host, does) and the roots
// whose entries it changed.
func (s *State) recount(fx *Effects) {
	x := s.idx
	if x == nil {
		return // built, counted, at first use
	}
	for id := range fx.Hosts {
		x.countHost(id, s.Hosts[id])
	}
	for id := range fx.Sessions {
		x.recountSession(s, id)
	}
	// The roots whose entries changed, when nothing else of them did (a tool call's entry
	// changes the row of its root only once a minute: touchCall), each once.
	var counted map[string]bool
	for _, op := range fx.Entries {
		if fx.Sessions[op.Root] || counted[op.Root] {
			continue
		}
		if counted == nil {
			counted = map[string]bool{}
		}
		counted[op.Root] = true
		x.recountSession(s, op.Root)
	}
}

// recountSession counts session id again in the tally.
func (x *index) recountSession(s *State, id string) {
	if sess := s.Sessions[id]; sess != nil && sess.RetryAt != 0 {
		x.retrying[id] = sess
	} else {
		delete(x.retrying, id)
	}
	now := tallyOf(s.Sessions[id])
	x.total = x.total.add(now.sub(x.counted[id]))
	if now == (tally{}) {
		delete(x.counted, id)
	} else {
		x.counted[id] = now
	}
}

// HostSessions returns the sessions of host, in id order.
func (s *State) HostSessions(host string) []*Session {
	return sortedSet(s.index().byHost[host])
}

// hasSessions reports whether thatch tracks any session of host.
func (s *State) hasSessions(host string) bool { return len(s.index().byHost[host]) > 0 }

func sortedSet(set map[string]*Session) []*Session {
	out := make([]*Session, 0, len(set))
	for _, sess := range set {
		out = append(out, sess)
	}
	slicesSortByID(out)
	return out
}

// CheckIndex compares the index with a full scan of Sessions and describes the first
// difference, or returns nil: the tests call it after every step.
func (s *State) CheckIndex() error {
	have := s.index()
	want := &State{Hosts: s.Hosts, Sessions: s.Sessions}
	want.Reindex()
	sets := func(what string, a, b map[string]map[string]*Session) error {
		for key, set := range b {
			for id, sess := range set {
				if a[key][id] != sess {
					return fmt.Errorf("%s index: %s lacks session %s", what, key, id)
				}
			}
		}
		for key, set := range a {
			if len(set) == 0 {
				return fmt.Errorf("%s index: empty set kept for %s", what, key)
			}
			for id := range set {
				if b[key][id] == nil {
					return fmt.Errorf("%s index: %s holds session %s, which is not there", what, key, id)
				}
			}
		}
		return nil
	}
	if err := sets("host", have.byHost, want.idx.byHost); err != nil {
		return err
	}
	if err := sets("parent", have.byParent, want.idx.byParent); err != nil {
		return err
	}
	if have.total != want.idx.total {
		return fmt.Errorf("tally %+v, a full count says %+v", have.total, want.idx.total)
	}
	if !maps.Equal(have.counted, want.idx.counted) {
		return fmt.Errorf("per-session tally differs from a full count")
	}
	if !maps.Equal(have.retrying, want.idx.retrying) {
		return fmt.Errorf("sessions retrying %v, a full scan says %v", slices.Sorted(maps.Keys(have.retrying)), slices.Sorted(maps.Keys(want.idx.retrying)))
	}
	if !maps.Equal(have.online, want.idx.online) || !maps.Equal(have.missing, want.idx.missing) {
		return fmt.Errorf("hosts online %v lacking tools %v, a full count says %v and %v", have.online, have.missing, want.idx.online, want.idx.missing)
	}
	return nil
}

func slicesSortByID(ss []*Session) {
	slices.SortFunc(ss, func(a, b *Session) int { return strings.Compare(a.ID, b.ID) })
}

// EntryID is the id, among its root's entries, of the tool call callID made in session:
// callID itself for a call of the root, "<session>/<callID>" for a call of a descendant (a
// task child). A call id is unique within one session at best: some providers number calls
// from 1 in every process, so a parent's call_1 and its task child's call_1 are two calls.
func EntryID(root, session, callID string) string {
	if session == root {
		return callID
	}
	return session + "/" + callID
}

// qualified reports whether entry id names a descendant's call. Call ids hold no "/" in
// practice (provider ids such as call_…, toolu_…), so one that does is taken as qualified.
func qualified(id string) bool { return strings.Contains(id, "/") }

func (s *Session) entry(id string) int {
	return slices.IndexFunc(s.Entries, func(e Entry) bool { return e.ID == id })
}
