package memory

import "strings"

// Line renders m on one line for a model, as the section does: "- [mem_…] (kind) content".
func Line(m Memory) string {
	return strings.TrimPrefix(linePrefix(m.ID, m.Kind), "\n") + oneLine.Replace(m.Content)
}
