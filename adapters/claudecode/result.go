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

