package runtime

import "slices"

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

// Summary summarises s; pos is the consumer position.
func Summary(s *State, pos uint64) StatusView {
	v := StatusView{Version: Version, Applied: s.Counters.Applied, Rejected: s.Counters.Rejected,
		Gaps: s.Counters.Gaps, LastStreamSeq: pos, Redacted: s.Counters.Redacted}
	for _, h := range s.Hosts {
		if h.Online {
			v.Hosts++
			if len(h.MissingTools) > 0 {
				v.HostsMissingTools = append(v.HostsMissingTools, h.ID)
			}
		}
	}
	slices.Sort(v.HostsMissingTools)
	for _, sess := range s.Sessions {
		if !sess.Exited {
			v.Sessions++
		}
		for _, e := range sess.Entries {
			if e.Accepted() {
				v.Accepted++
			} else {
				v.Pending++
			}
		}
	}
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
}

// LiveSessions lists the live directory: every tracked session that did not exit, of one
// host when hostID is set, in id order.
func LiveSessions(s *State, hostID string) []SessionView {
	out := []SessionView{}
	for _, sess := range s.sorted() {
		if sess.Exited || (hostID != "" && sess.HostID != hostID) {
			continue
		}
		pending := sess.Pending()
		out = append(out, SessionView{SessionID: sess.ID, HostID: sess.HostID, ParentID: sess.ParentID,
			Kind: sess.Kind, Status: sess.Status, Pending: pending, Accepted: len(sess.Entries) - pending,
			Extracting: sess.Extracting, Compacting: sess.Compacting, WrapUp: sess.WrapUp,
			Directory: sess.Directory, Title: sess.Title})
	}
	return out
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
	sess := s.Sessions[sessionID]
	if sess == nil {
		return nil
	}
	out := []EntryView{}
	for _, e := range sess.Entries {
		v := EntryView{ID: e.ID, State: "pending", Tool: e.Tool}
		if e.Accepted() {
			v.State, v.ClaimedBy = "accepted", e.Claimant
		}
		out = append(out, v)
	}
	return out
}
