package web_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/thatch-dev/thatch/journal/memory"
	"github.com/thatch-dev/thatch/runtime"
)

// TestProvenancePages (issue 29): after an extraction, the session's page shows the calls
// it completed (tool, title, call id) and the memories it wrote, linked; the memory's page
// names the session it was extracted from, the extraction, and the same calls.
func TestProvenancePages(t *testing.T) {
	r := newRig(t)
	r.populate()
	c := r.login()
	r.deliver("session.status", `{"sessionID":"`+topID+`","status":{"type":"idle"}}`)
	r.applied()
	child := "ses_child_of_" + topID
	// The stub host creates the child at once; the loop names it when the result is in.
	r.waitSession(topID, "an extraction child", func(s runtime.SessionRow) bool { return s.Child == child })
	ctx := context.Background()
	if a := r.loop.Tool(ctx, runtime.ToolCall{Name: runtime.ToolPayload, SessionID: child, CallID: "pc1", Args: []byte(`{}`)}, 0); a.Err != nil {
		t.Fatal(a.Err)
	}
	m := r.remember(memory.Caller{Project: api.Project, SessionID: child, CallID: "w1", Directory: "/w/api"}, "the migrations live in db/migrations, one file a version")
	if a := r.loop.Tool(ctx, runtime.ToolCall{Name: runtime.ToolDone, SessionID: child, CallID: "pc2", Args: []byte(`{"new":1}`)}, 0); a.Err != nil {
		t.Fatal(a.Err)
	}

	body := r.page(c, "/sessions/"+topID)
	prov := regexp.MustCompile(`(?s)<table class="grid" id="provenance">.*?</table>`).FindString(body)
	for _, want := range []string{`data-extraction="` + child + `"`, `<li data-call="call_1">bash List the migrations <code>call_1</code></li>`,
		`<li data-call="call_2">bash Read the vault config <code>call_2</code></li>`, `create <a href="/memories/` + m.ID + `">` + m.ID + `</a>`} {
		if !strings.Contains(prov, want) {
			t.Errorf("the session page's provenance lacks %s:\n%s", want, prov)
		}
	}

	body = r.page(c, "/memories/"+m.ID)
	prov = regexp.MustCompile(`(?s)<div id="provenance">.*?</div>`).FindString(body)
	for _, want := range []string{`Extracted from session <a href="/sessions/` + topID + `">` + topID + `</a> by extraction <code>` + child + `</code>`,
		`<li data-call="call_1">bash List the migrations <code>call_1</code></li>`, `<li data-call="call_2">bash Read the vault config <code>call_2</code></li>`} {
		if !strings.Contains(prov, want) {
			t.Errorf("the memory page's provenance lacks %s:\n%s", want, prov)
		}
	}
	// A memory no extraction wrote has none.
	other := r.remember(api, "the api's staging host is staging-api-01")
	if body := r.page(c, "/memories/"+other.ID); strings.Contains(body, `id="provenance"`) {
		t.Errorf("a memory the session wrote itself shows a provenance")
	}
}
