package runtime

import (
	"fmt"
	"strings"
)

// ExtractionPrompt instructs an extraction child. The child works on its parent's
// entries through the two tools and nothing else.
const ExtractionPrompt = `You are thatch's memory extraction session for your parent session.

1. Call ` + ToolPayload + ` once. It hands you the parent's tool interactions that have not been extracted yet; they are now yours alone.
2. Read them and keep what is worth remembering beyond this session: decisions and their reasons, facts about the project, the user's preferences, commands that worked, pitfalls found. Write, update or delete memories with your memory tools. Skip anything transient or already recorded.
3. Call ` + ToolDone + ` with the number of memories you created (new), updated (updated) and deleted (deleted), even when all three are 0.

Do nothing else: do not edit files and do not run commands. Reply in one short sentence when done.`

// reminder is the session-start reminder for a top-level session, with a hygiene line
// when a signal is non-zero. The signals restart from zero once reported.
func (t *step) reminder() string {
	var b strings.Builder
	b.WriteString("[thatch] This session's tool calls are recorded. When you go idle, thatch extracts durable memories from them in a separate session, so nothing you learn here is lost.\n")
	b.WriteString("Before you stop, the user can run /thatch/compact (flush memories, then compact) or /thatch/exit (flush memories, then close the session); each proceeds only when your reply ends with its ready token.")
	c := &t.s.Counters
	var parts []string
	if c.StaleRequeued > 0 {
		parts = append(parts, fmt.Sprintf("%d stale claims requeued", c.StaleRequeued))
	}
	if c.Healed > 0 {
		parts = append(parts, fmt.Sprintf("%d stranded sessions healed", c.Healed))
	}
	if c.Swept > 0 {
		parts = append(parts, fmt.Sprintf("%d sessions' journal rows swept", c.Swept))
	}
	if len(parts) > 0 {
		b.WriteString("\nHygiene since the last session: " + strings.Join(parts, ", ") + ".")
		c.StaleRequeued, c.Healed, c.Swept = 0, 0, 0
		t.fx.Counters = true
	}
	return b.String()
}
