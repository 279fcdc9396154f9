package runtime

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Version is thatch's version, set at build time with -ldflags.
var Version = "dev"

// StatusView is the result of the status API method.
type StatusView struct {
	Version       string `json:"version"`
	Hosts         int    `json:"hosts"`
	Sessions      int    `json:"sessions"`
	Pending       int    `json:"pending"`
	Accepted      int    `json:"accepted"`
	Applied       int64  `json:"applied"`
	Rejected      int64  `json:"rejected"`
	Gaps          int64  `json:"gaps"`
	LastStreamSeq uint64 `json:"lastStreamSeq"`
	// Extensions. Consuming is false while the consumer does not run (a broker outage);
	// OutstandingCalls counts host calls committed but not yet answered.
	Consuming        bool `json:"consuming"`
	OutstandingCalls int  `json:"outstandingCalls"`
	// WaitingCalls counts host calls that found no responder: they wait in the outbox for
	// their host's next hello (rule 12).
	WaitingCalls int    `json:"waitingCalls"`
	JournalError string `json:"journalError,omitempty"`
	Goroutines   int    `json:"goroutines"`
	// Memories counts the live memories (protocol §6); MemoryError is the store's last
	// read error while it fails.
	Memories    int    `json:"memories"`
	MemoryError string `json:"memoryError,omitempty"`
	// BrokerError is the embedded broker's JetStream problem while it has one (a store
	// write error such as a full disk): events can then be neither published nor consumed.
	BrokerError string `json:"brokerError,omitempty"`
	// Redacted counts the secrets and private blocks kept out of the journal (since it was
	// created), and out of the memory store and the in-process bridge's events (since
	// thatch started), rule 13.
	Redacted int64 `json:"redacted"`
	// Extraction is what extraction cost today and in the last 7 days, and the daily
	// budget (rule 14).
	Extraction *ExtractionView `json:"extraction,omitempty"`
	// HostsMissingTools lists, in id order, the online hosts that have not loaded thatch's
	// tools (their plugin is not loaded): no extraction starts for their sessions.
	HostsMissingTools []string `json:"hostsMissingTools,omitempty"`
	// Bridge is the in-process opencode bridge's connection to its server, as the bridge
	// writes it (adapters/opencode's BridgeStatus); absent without one. Each reader
	// decodes the fields it shows.
	Bridge json.RawMessage `json:"bridge,omitempty"`
	// Team is team memory's connection (protocol §9); absent without THATCH_TEAM_URL.
	Team *TeamStatus `json:"team,omitempty"`
	// LastExtractionFailure is the last extraction child that failed, with the host's
	// message: why entries wait when no extraction succeeds.
	LastExtractionFailure *ExtractionFailureView `json:"lastExtractionFailure,omitempty"`
	// LastExtractionSuccess is when an extraction last completed entries.
	LastExtractionSuccess *time.Time `json:"lastExtractionSuccess,omitempty"`
}

// ExtractionFailureView is status's last extraction failure and whether an extraction
// completed entries since: then it is history, not a current problem.
type ExtractionFailureView struct {
	ExtractionFailure
	SucceededSince bool `json:"succeededSince"`
}

// TeamStatus is status.team (protocol §9): the team's URL without credentials, whether
// thatch is connected to it and since when that holds, the author of this thatch's
// versions, the shared projects, the versions waiting to be sent, the records refused and
// when a version was last applied.
type TeamStatus struct {
	URL            string     `json:"url"`
	Connected      bool       `json:"connected"`
	Since          time.Time  `json:"since"`
	Author         string     `json:"author"`
	SharedProjects []string   `json:"sharedProjects"`
	Outbox         int        `json:"outbox"`
	Rejected       int        `json:"rejected"`
	LastApplied    *time.Time `json:"lastApplied,omitempty"`
	// Refused is the last records refused from the team, newest first (at most
	// TeamRefusedShown): what was wrong with each, to fix at the teammate who sent it.
	Refused []TeamRefusal `json:"refused,omitempty"`
	// PublishRefused is the projects whose versions the team's server refused to take (a
	// permissions violation: not granted to this teammate); they wait in the outbox.
	PublishRefused []string `json:"publishRefused,omitempty"`
}

// TeamRefusedShown is how many of the last refused team records status.team lists.
const TeamRefusedShown = 5

// TeamRefusal is one record refused from the team: its project and subject, why (a kind
// and the detail) and when.
type TeamRefusal struct {
	Project   string    `json:"project"`
	Subject   string    `json:"subject"`
	Kind      string    `json:"kind"`
	Reason    string    `json:"reason"`
	StreamSeq uint64    `json:"streamSeq"`
	At        time.Time `json:"at"`
}

// ExtractionView is the status's account of extraction's cost.
type ExtractionView struct {
	Today Spend `json:"today"` // the current UTC day
	Week  Spend `json:"week"`  // the last 7 UTC days, today included
	// DailyTokens is THATCH_EXTRACT_DAILY_TOKENS (0: no limit); BudgetReached says no
	// extraction starts until the next UTC day.
	DailyTokens   int64  `json:"dailyTokens"`
	BudgetReached bool   `json:"budgetReached"`
	Model         string `json:"model,omitempty"` // THATCH_EXTRACT_MODEL, when set
	Error         string `json:"error,omitempty"` // the ledger could not be read
}

// Spend sums extractions' costs.
type Spend struct {
	Extractions int     `json:"extractions"`
	Tokens      int64   `json:"tokens"`
	TokensIn    int64   `json:"tokensIn"`
	TokensOut   int64   `json:"tokensOut"`
	USD         float64 `json:"cost"`
}

// CostRow is one UTC day's extraction spending for one project: a row of thatch costs.
type CostRow struct {
	Day     string `json:"day"`
	Project string `json:"project"`
	// Directory is a folder of the project's sessions, to show instead of the project key
	// (a hash); empty for rows journaled before thatch kept it.
	Directory   string   `json:"directory,omitempty"`
	Extractions int      `json:"extractions"`
	Entries     int      `json:"entries"`
	Tokens      int64    `json:"tokens"`
	TokensIn    int64    `json:"tokensIn"`
	TokensOut   int64    `json:"tokensOut"`
	USD         float64  `json:"cost"`
	Models      []string `json:"models,omitempty"`
}

// Add adds r to s.
func (s *Spend) Add(r CostRow) {
	s.Extractions += r.Extractions
	s.Tokens += r.Tokens
	s.TokensIn += r.TokensIn
	s.TokensOut += r.TokensOut
	s.USD += r.USD
}

// Summary summarises s; pos is the consumer position. Its figures are kept as hosts,
// sessions and entries change (State's index), so it costs the sort of the hosts that
// lack tools, not a pass over hosts, sessions or entries.
func Summary(s *State, pos uint64) StatusView {
	v := StatusView{Version: Version, Applied: s.Counters.Applied, Rejected: s.Counters.Rejected,
		Gaps: s.Counters.Gaps, LastStreamSeq: pos, Redacted: s.Counters.Redacted}
	if ms := s.Counters.LastExtractionSuccess; ms != 0 {
		at := time.UnixMilli(ms).UTC()
		v.LastExtractionSuccess = &at
	}
	if f := s.Counters.LastExtractionFailure; f != nil {
		v.LastExtractionFailure = &ExtractionFailureView{ExtractionFailure: *f,
			SucceededSince: v.LastExtractionSuccess != nil && !v.LastExtractionSuccess.Before(f.At)}
	}
	x := s.index()
	v.Hosts = len(x.online)
	if len(x.missing) > 0 {
		v.HostsMissingTools = slices.Sorted(maps.Keys(x.missing))
	}
	v.Sessions, v.Pending, v.Accepted = x.total.Live, x.total.Pending, x.total.Accepted
	return v
}

// SessionView is one row of the sessions API method.
type SessionView struct {
	SessionID  string `json:"sessionID"`
	HostID     string `json:"hostID"`
	ParentID   string `json:"parentID,omitempty"`
	Kind       Kind   `json:"kind"`
	Status     Status `json:"status"`
	Pending    int    `json:"pending"`
	Accepted   int    `json:"accepted"`
	Extracting bool   `json:"extracting"`
	Compacting bool   `json:"compacting"`
	WrapUp     WrapUp `json:"wrapUp"`
	Directory  string `json:"directory"`
	Title      string `json:"title,omitempty"`
	// Refused is the session's last wrap-up command that did not proceed, until another
	// is armed or one is greenlit (an extension of the contract's row).
	Refused *Refusal `json:"refused,omitempty"`
	// Failed counts the session's extractions that failed since one last completed
	// entries, and RetryAt is when the next is retried, if one is scheduled (an
	// extension: retry.go).
	Failed  int        `json:"failed,omitempty"`
	RetryAt *time.Time `json:"retryAt,omitempty"`
}

// retryAt is sess's RetryAt as a time, nil when none is scheduled.
func retryAt(sess *Session) *time.Time {
	if sess.RetryAt == 0 {
		return nil
	}
	at := time.UnixMilli(sess.RetryAt).UTC()
	return &at
}

// LiveSessions lists the live directory: every tracked session that did not exit, of one
// host when hostID is set, in id order.
func LiveSessions(s *State, hostID string) []SessionView {
	rows, _ := SessionPage(s, hostID, "", 0)
	return rows
}

// SessionPage lists a page of the live directory in id order: the sessions after the id
// after ("" from the first), of host hostID when set, at most limit of them (every one
// when limit is 0). more says whether sessions follow the page. It costs a pass over the
// host's sessions (every session without hostID) and the sort of one page, nothing per
// entry.
func SessionPage(s *State, hostID, after string, limit int) (rows []SessionView, more bool) {
	var pool map[string]*Session
	if hostID != "" {
		pool = s.index().byHost[hostID]
	} else {
		pool = s.Sessions
	}
	page := firstAfter(pool, after, limit, func(sess *Session) bool { return !sess.Exited })
	more = limit > 0 && len(page) > limit
	if more {
		page = page[:limit]
	}
	rows = make([]SessionView, 0, len(page))
	counted := s.index().counted // a session's entries may be many: their counts are kept
	for _, sess := range page {
		c := counted[sess.ID]
		rows = append(rows, SessionView{SessionID: sess.ID, HostID: sess.HostID, ParentID: sess.ParentID,
			Kind: sess.Kind, Status: sess.Status, Pending: c.Pending, Accepted: c.Accepted,
			Extracting: sess.Extracting, Compacting: sess.Compacting, WrapUp: sess.WrapUp,
			Directory: sess.Directory, Title: sess.Title, Refused: sess.Refused, Failed: int(sess.Failed), RetryAt: retryAt(sess)})
	}
	return rows, more
}

// firstAfter returns, in id order, the limit+1 sessions of pool with the smallest ids
// above after that keep holds for (all of them when limit is 0). It keeps the page in a
// max-heap, so a page of k out of n sessions costs n·log k, not a sort of all n.
func firstAfter(pool map[string]*Session, after string, limit int, keep func(*Session) bool) []*Session {
	var out []*Session
	if limit <= 0 {
		for id, sess := range pool {
			if id > after && keep(sess) {
				out = append(out, sess)
			}
		}
		slicesSortByID(out)
		return out
	}
	k := limit + 1 // one more tells whether the page is the last
	h := make([]*Session, 0, min(k, len(pool)))
	less := func(i, j int) bool { return h[i].ID > h[j].ID } // the largest id on top
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			if r := l + 1; r < len(h) && less(r, l) {
				l = r
			}
			if !less(l, i) {
				return
			}
			h[i], h[l] = h[l], h[i]
			i = l
		}
	}
	for id, sess := range pool {
		if id <= after || !keep(sess) {
			continue
		}
		if len(h) < k {
			h = append(h, sess)
			for i := len(h) - 1; i > 0 && less(i, (i-1)/2); i = (i - 1) / 2 {
				h[i], h[(i-1)/2] = h[(i-1)/2], h[i]
			}
			continue
		}
		if id < h[0].ID {
			h[0] = sess
			down(0)
		}
	}
	slicesSortByID(h)
	return h
}

// EntryView is one row of the entries API method.
type EntryView struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	ClaimedBy string `json:"claimedBy,omitempty"`
	Tool      string `json:"tool"`
}

// EntryList lists the journaled entries of a top-level session, or nil when thatch does
// not track it.
func EntryList(s *State, sessionID string) []EntryView {
	rows, _, _, _ := EntryPage(s, sessionID, "", 0)
	return rows
}

// EntryCursor is the cursor of the entries that follow the entry id at position i of its
// session (0 the first): the position spares a search while nothing moved.
func EntryCursor(i int, id string) string { return strconv.Itoa(i) + ":" + id }

// EntryPage lists a page of a top-level session's entries in arrival order: those after
// the entry of cursor (EntryCursor; "" from the first), at most limit (all when 0); from
// is the position of the first row, more says whether entries follow. When the entry of
// the cursor is gone (completed or dropped since the previous page), the page starts
// again at the first entry (restarted): a listing then repeats entries, which its reader
// drops by id, rather than missing any. rows is nil when thatch does not track the
// session.
func EntryPage(s *State, sessionID, cursor string, limit int) (rows []EntryView, from int, more, restarted bool) {
	sess := s.Sessions[sessionID]
	if sess == nil {
		return nil, 0, false, false
	}
	if cursor != "" {
		at, id, hinted := strings.Cut(cursor, ":")
		i, err := strconv.Atoi(at)
		switch {
		case hinted && err == nil && i >= 0 && i < len(sess.Entries) && sess.Entries[i].ID == id:
		case hinted && err == nil:
			i = sess.entry(id)
		default:
			i = sess.entry(cursor) // a bare entry id
		}
		if i >= 0 {
			from = i + 1
		} else {
			restarted = true
		}
	}
	entries := sess.Entries[from:]
	if more = limit > 0 && len(entries) > limit; more {
		entries = entries[:limit]
	}
	rows = make([]EntryView, 0, len(entries))
	for _, e := range entries {
		v := EntryView{ID: e.ID, State: "pending", Tool: e.Tool()}
		if e.Accepted() {
			v.State, v.ClaimedBy = "accepted", e.Claimant()
		}
		rows = append(rows, v)
	}
	return rows, from, more, restarted
}

// DeadBodyMax is how many characters of a dead letter's body the deadletters method gives
// (protocol §4).
const DeadBodyMax = 2000

// DeadLetterView is one row of the deadletters API method.
type DeadLetterView struct {
	ID        int64     `json:"-"` // the journal's row id: the cursor of the next page
	StreamSeq uint64    `json:"streamSeq"`
	Subject   string    `json:"subject"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
	Body      string    `json:"body"`
}

// CutText cuts s to at most n characters (runes), marking the cut.
func CutText(s string, n int) string { return cut(s, n) }

// Provenance is what one extraction completed (issue 29): the tool calls of session
// Session whose entries Extraction, the claimant, completed, as the journal kept them when
// it dropped the entries. Extraction is an extraction child, or a top-level session that
// extracted its own calls; the memory store's history names it as the writer of each memory
// it created, updated or forgot.
type Provenance struct {
	Extraction string          `json:"extraction"`
	Session    string          `json:"session"`
	At         time.Time       `json:"at"` // the last completion
	Calls      []CompletedCall `json:"calls"`
	// More counts the completed calls left out of Calls: a reader gets a bounded list.
	More int `json:"more,omitempty"`
}

// CompletedCall is one tool call an extraction completed: its entry id (the host's callID,
// qualified by the session that made it when a descendant did), its tool, and its title cut
// to the journal's bound.
type CompletedCall struct {
	ID    string `json:"id"`
	Tool  string `json:"tool"`
	Title string `json:"title,omitempty"`
}
