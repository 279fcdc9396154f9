package web_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

// A wrap-up command that did not proceed (rule 6) shows on the session's page, with its
// reason, and on the sessions list (issue 29, point 10). The rig's host answers the
// messages with none: no token.
func TestSessionPagesShowARefusedWrapUp(t *testing.T) {
	r := newRig(t)
	r.populate()
	c := r.login()
	r.deliver("session.status", `{"sessionID":"`+topID+`","status":{"type":"busy"}}`)
	r.deliver("command.execute.before", `{"sessionID":"`+topID+`","command":"thatch/exit","arguments":""}`)
	r.deliver("session.status", `{"sessionID":"`+topID+`","status":{"type":"idle"}}`)
	r.applied()
	const reason = "the last assistant message does not end with THATCH_EXIT_READY"
	// The refusal follows the result of the messages call the idle made.
	r.waitSession(topID, "a refusal recorded", func(s runtime.SessionRow) bool { return s.Refused != nil })
	row := regexp.MustCompile(`<tr id="wrap-up-refused">.*?</tr>`).FindString(r.page(c, "/sessions/"+topID))
	if !strings.Contains(row, "/thatch/exit refused") || !strings.Contains(row, reason) {
		t.Fatalf("the session page's wrap-up row: %q", row)
	}
	list := r.page(c, "/sessions")
	node := regexp.MustCompile(`(?s)<tr class="depth-0[^"]*" data-session="` + topID + `">.*?</tr>`).FindString(list)
	if !strings.Contains(node, "/thatch/exit refused") || !strings.Contains(node, `title="`+reason+`"`) {
		t.Errorf("the sessions list's row:\n%s", node)
	}
}

// A session whose extraction failed shows it on the sessions list, with when its retry is
// due (the retry extension of rules 3 and 5), until an extraction completes its entries.
func TestSessionsListShowsAFailedExtraction(t *testing.T) {
	r := newRig(t)
	r.populate()
	c := r.login()
	r.deliver("session.status", `{"sessionID":"`+topID+`","status":{"type":"idle"}}`)
	child := "ses_child_of_" + topID
	r.waitSession(child, "the extraction child created", func(runtime.SessionRow) bool { return true })
	r.deliver("session.error", `{"sessionID":"`+child+`","error":{"name":"APIError","data":{"message":"the model is down"}}}`)
	r.applied()
	r.waitSession(topID, "the failure counted", func(s runtime.SessionRow) bool { return s.Failed == 1 })
	list := r.page(c, "/sessions")
	node := regexp.MustCompile(`(?s)<tr class="depth-0[^"]*" data-session="` + topID + `">.*?</tr>`).FindString(list)
	if !strings.Contains(node, "extraction failed ×1") || !strings.Contains(node, `title="retried at `) {
		t.Errorf("the sessions list's row:\n%s", node)
	}
}
