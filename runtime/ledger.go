package runtime

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Extraction's cost (rule 14 and issue 14): the model it runs on, what each child cost,
// the daily token budget, and the idles that are not worth a child.

// extractModel is the model of host's extraction children: THATCH_EXTRACT_MODEL, else
// the host's small model, else "" (the host's choice; the opencode bridge then uses the
// parent session's model).
func (t *step) extractModel(host string) string {
	if t.ExtractModel != "" {
		return t.ExtractModel
	}
	if h := t.s.Hosts[host]; h != nil {
		return h.SmallModel
	}
	return ""
}

// Day is the ledger's day of at: its UTC date.
func Day(at time.Time) string { return at.UTC().Format(time.DateOnly) }

// SpentToday returns the extraction tokens of now's UTC day.
func (s *State) SpentToday(now time.Time) int64 {
	if s.Counters.Day != Day(now) {
		return 0
	}
	return s.Counters.DayTokens
}

// BudgetReached reports whether a daily budget of budget tokens (0: none) stops new
// extractions at now.
func (s *State) BudgetReached(budget int64, now time.Time) bool {
	return budget > 0 && s.SpentToday(now) >= budget
}

// overBudget is rule 14's check before an extraction starts: past the daily budget no
// child is created and the entries stay pending. The first refusal of a day says so in a
// warning toast and a log line.
func (t *step) overBudget(sess *Session) bool {
	if !t.s.BudgetReached(t.DailyTokens, t.now) {
		return false
	}
	if day := Day(t.now); t.s.Counters.Warned != day {
		t.s.Counters.Warned = day
		t.fx.Counters = true
		t.note(slog.LevelWarn, "daily extraction token budget reached: no extraction starts until the next UTC day; entries stay pending",
			"spent", t.s.SpentToday(t.now), "budget", t.DailyTokens, "session", sess.ID)
		t.toast(sess.HostID, "thatch", fmt.Sprintf("Daily extraction budget reached (%s of %s %s). Memories wait until tomorrow (UTC); nothing is lost. Raise THATCH_EXTRACT_DAILY_TOKENS to extract today.",
			FormatTokens(t.s.SpentToday(t.now)), FormatTokens(t.DailyTokens), plural(t.DailyTokens, "token", "tokens")), "warning")
	}
	return true
}

// retireTrivial drops sess's pending entries when every one of them is trivial, and
// reports whether it did: such an idle is not worth a model turn.
func (t *step) retireTrivial(sess *Session) bool {
	n := 0
	for _, e := range sess.Entries {
		if !e.Accepted() {
			if !e.Trivial() {
				return false
			}
			n++
		}
	}
	kept := sess.Entries[:0]
	for _, e := range sess.Entries {
		if e.Accepted() {
			kept = append(kept, e)
			continue
		}
		t.fx.Entries = append(t.fx.Entries, EntryOp{Kind: EntryDelete, Root: sess.ID, ID: e.ID})
	}
	clear(sess.Entries[len(kept):])
	sess.Entries = kept
	if len(kept) == 0 {
		sess.Entries = nil
	}
	t.dirty(sess)
	t.count(&t.s.Counters.Trivial, int64(n))
	t.note(slog.LevelInfo, "nothing worth extracting: the pending entries had empty or left-out outputs; dropped without a model turn", "session", sess.ID, "entries", n)
	return true
}

// ledger continues an ended extraction child once its messages are read: the cost goes
// into the ledger (and today's spending), the toast goes out with it, and the child is
// deleted. A child whose messages cannot be read is deleted all the same.
func (t *step) ledger(c Call, res Result) {
	ref := c.Ledger
	if ref == nil {
		ref = &LedgerRef{}
	}
	var cost Cost
	known := res.Err == nil
	if known {
		cost = CostOf(res.Messages)
		if cost.Model == "" {
			cost.Model = ref.Model
		}
		if cost.Tokens() > 0 || cost.USD > 0 || ref.Entries > 0 { // a child interrupted before its first answer cost nothing known
			row := LedgerRow{Child: c.SessionID, Root: ref.Root, Project: ref.Project, Directory: ref.Directory, Day: Day(t.now), At: t.now, Entries: ref.Entries, Cost: cost}
			t.fx.Ledger = append(t.fx.Ledger, row)
			if t.s.Counters.Day != row.Day {
				t.s.Counters.Day, t.s.Counters.DayTokens = row.Day, 0
			}
			t.count(&t.s.Counters.DayTokens, cost.Tokens())
			t.note(slog.LevelInfo, "extraction cost", "session", ref.Root, "child", c.SessionID, "model", cost.Model,
				"tokens_in", cost.TokensIn, "tokens_out", cost.TokensOut, "cost_usd", RoundUSD(cost.USD))
		}
	} else if !res.Err.NoResponder && res.Err.Name != protocol.NotFound {
		t.note(slog.LevelWarn, "could not read an extraction child's messages: its cost is not in the ledger", "host", c.Host, "session", ref.Root, "child", c.SessionID, "error", res.Err.Error())
	}
	if ref.Toast != "" {
		msg := ref.Toast
		if known && (cost.Tokens() > 0 || cost.USD > 0) { // a host that reports no figures gets no "0 tokens"
			msg += " · " + FormatCost(cost)
		}
		t.toast(c.Host, "thatch", msg, "success")
	}
	t.call(Call{Host: c.Host, Op: OpDelete, SessionID: c.SessionID})
}

// FormatTokens writes a token count for people: 950, 12.3k, 4.56M.
func FormatTokens(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n < 1_000_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprintf("%.2fM", float64(n)/1e6)
}

// RoundUSD rounds an amount to a millionth of a dollar, for logs: sums of the host's
// per-turn costs carry float noise (0.0021000000000000003).
func RoundUSD(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// formatUSD writes an amount in dollars with the precision small amounts need.
func formatUSD(v float64) string {
	if v >= 1 || v == 0 {
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("$%.4f", v)
}

// FormatCost is a cost as a toast names it: "12.3k tokens, $0.0042".
func FormatCost(c Cost) string {
	s := FormatTokens(c.Tokens()) + " " + plural(c.Tokens(), "token", "tokens")
	if c.USD > 0 {
		s += ", " + formatUSD(c.USD)
	}
	return s
}
