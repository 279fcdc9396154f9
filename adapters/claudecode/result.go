package claudecode

import "fmt"

// failure is the message of a failed extraction child's run: the process's error when it
// did not run or exited non-zero (an empty standard output's JSON error says nothing
// more), else the result's own error; with its standard error and result text.
func failure(runErr, jsonErr error, stderr string, res Result) string {
	var cause string
	switch {
	case runErr != nil:
		cause = runErr.Error()
	case jsonErr != nil:
		cause = "its output is not a JSON result: " + jsonErr.Error()
	default:
		cause = "its result is an error (" + res.Subtype + ")"
	}
	if detail := cutText(stderr+" "+res.Result, 300); detail != "" {
		return fmt.Sprintf("claude -p failed: %s: %s", cause, detail)
	}
	return "claude -p failed: " + cause
}

// ModelUsage is a headless run's use of one model (its JSON result's modelUsage).
type ModelUsage struct {
	OutputTokens int64   `json:"outputTokens"`
	CostUSD      float64 `json:"costUSD"`
}

// model is the full name of the model the run used, as its result's modelUsage names it
// ("claude-haiku-4-5-20251001" for the alias "haiku"), else asked, the name it was run
// with. Of several, the one that cost most (then wrote most) did the run.
func (r *Result) model(asked string) string {
	best, found := ModelUsage{}, ""
	for name, u := range r.ModelUsage {
		if found == "" || u.CostUSD > best.CostUSD || u.CostUSD == best.CostUSD && (u.OutputTokens > best.OutputTokens ||
			u.OutputTokens == best.OutputTokens && name < found) {
			best, found = u, name
		}
	}
	if found == "" {
		return asked
	}
	return found
}
