package memory

import (
	"database/sql/driver"
	"fmt"
	"strings"

	"modernc.org/sqlite"
)

// The index's scoped column (migration 6) holds each word of a memory prefixed with its
// project's scope token (scope: p + 16 hex digits, a fixed length, so no scoped word reads
// as another project's). A project's search matches only that project's postings.

func init() {
	sqlite.MustRegisterDeterministicScalarFunction("thatch_scoped", 3, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		var text [3]string
		for i, a := range args {
			switch v := a.(type) {
			case string:
				text[i] = v
			case []byte:
				text[i] = string(v)
			case nil:
			default:
				return nil, fmt.Errorf("thatch_scoped: argument %d is a %T, not text", i+1, a)
			}
		}
		return scopedWords(text[0], text[1]+" "+text[2]), nil
	})
}

// scopedWords is the words of text (tokens) each prefixed with scope, space-separated.
func scopedWords(scope, text string) string {
	var b strings.Builder
	for i, w := range tokens(text) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(scope)
		b.WriteString(w)
	}
	return b.String()
}

// scopedPhrase is term as a phrase of scope's scoped words, quoted for FTS5; "" when term
// holds no word.
func scopedPhrase(scope, term string) string {
	words := scopedWords(scope, term)
	if words == "" {
		return ""
	}
	return `"` + words + `"`
}
