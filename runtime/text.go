package runtime

import (
	"fmt"
	"strings"
)

// ExtractionPrompt instructs an extraction child. The child works on its parent's
// entries through the two tools and nothing else.
const ExtractionPrompt = `You are thatch's memory extraction session for your parent session.

1. Call ` + ToolPayload + ` once. It hands you the parent's tool interactions that have not been extracted yet (they are now yours alone), followed by the project's existing memories that look related, each with its id.
2. Keep what a later session on this project would want to know: decisions and their reasons (kind decision), facts about the project (fact), the user's preferences (preference), commands that worked (command), pitfalls found and how they were avoided (pitfall), work left to do (todo). One memory per point, in one or two plain sentences that stand on their own. Skip anything transient, obvious from the code, or already recorded.
3. Write with the memory tools: when an existing memory says the same thing or something it corrects, call ` + ToolUpdate + ` with its id instead of adding a new one; call ` + ToolForget + ` for a memory the interactions show to be wrong or obsolete; call ` + ToolRemember + ` only for what is new. ` + ToolSearch + ` finds other memories when you need to check.
4. Call ` + ToolDone + ` with the number of memories you created (new), updated (updated) and deleted (deleted), even when all three are 0.

Do nothing else: do not edit files and do not run commands. Reply in one short sentence when done.`

// Reminder is the session-start reminder for a top-level session, with a hygiene line
// naming the signals when there are any.
func Reminder(hygiene []string) string {
	var b strings.Builder
	b.WriteString("[thatch] This session's tool calls are recorded. When you go idle, thatch extracts durable memories from them in a separate session, so nothing you learn here is lost.\n")
	b.WriteString("Memories of this project persist across sessions: " + ToolSearch + " finds them, " + ToolRemember + " keeps a new one, " + ToolUpdate + " and " + ToolForget + " fix them.\n")
	b.WriteString("Before you stop, the user can run /thatch/compact (flush memories, then compact) or /thatch/exit (flush memories, then close the session); each proceeds only when your reply ends with its ready token.")
	if len(hygiene) > 0 {
		b.WriteString("\nHygiene since the last session: " + strings.Join(hygiene, ", ") + ".")
	}
	return b.String()
}

// reminder is Reminder with the hygiene signals counted since the last reminder, which
// restart from zero once reported.
func (t *step) reminder() string {
	c := &t.s.Counters
	var parts []string
	if c.StaleRequeued > 0 {
		parts = append(parts, fmt.Sprintf("%d stale %s requeued", c.StaleRequeued, plural(c.StaleRequeued, "claim", "claims")))
	}
	if c.Healed > 0 {
		parts = append(parts, fmt.Sprintf("%d stranded %s healed", c.Healed, plural(c.Healed, "session", "sessions")))
	}
	if c.Swept > 0 {
		parts = append(parts, fmt.Sprintf("%d %s journal rows swept", c.Swept, plural(c.Swept, "session's", "sessions'")))
	}
	if len(parts) > 0 {
		c.StaleRequeued, c.Healed, c.Swept = 0, 0, 0
		t.fx.Counters = true
	}
	return Reminder(parts)
}

// plural is one when n is 1, else many: fmt.Sprintf("%d %s", n, plural(n, "day", "days")).
func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
