package host

import (
	"encoding/json"
	"testing"

	"github.com/thatch-dev/thatch/runtime"
)

func TestEncode(t *testing.T) {
	for _, tc := range []struct {
		api  string
		call runtime.Call
		want string
	}{
		{"v1", runtime.Call{Op: runtime.OpCreate, SessionID: "p", Title: "thatch-extraction"}, `session.create {"parentID":"p","title":"thatch-extraction"}`},
		{"v1", runtime.Call{Op: runtime.OpPrompt, SessionID: "s", Text: "hi", NoReply: true, Synthetic: true},
			`session.prompt {"noReply":true,"parts":[{"synthetic":true,"text":"hi","type":"text"}],"sessionID":"s"}`},
		{"v2", runtime.Call{Op: runtime.OpPrompt, SessionID: "s", Text: "go"}, `session.prompt {"parts":[{"text":"go","type":"text"}],"sessionID":"s"}`},
		{"v1", runtime.Call{Op: runtime.OpDelete, SessionID: "s"}, `session.delete {"sessionID":"s"}`},
		{"v2", runtime.Call{Op: runtime.OpList}, `session.list {}`},
		{"v1", runtime.Call{Op: runtime.OpProjects}, `project.list {}`},
		{"v2", runtime.Call{Op: runtime.OpMove, SessionID: "s", Directory: "/w"}, `session.move {"directory":"/w","sessionID":"s"}`},
		{"v1", runtime.Call{Op: runtime.OpMessages, SessionID: "s"}, `session.messages {"sessionID":"s"}`},
		{"v2", runtime.Call{Op: runtime.OpMessages, SessionID: "s"}, `session.context {"sessionID":"s"}`},
		{"v1", runtime.Call{Op: runtime.OpCompact, SessionID: "s"}, `tui.executeCommand {"command":"session_compact","sessionID":"s"}`},
		{"v2", runtime.Call{Op: runtime.OpCompact, SessionID: "s"}, `session.compact {"sessionID":"s"}`},
		{"v1", runtime.Call{Op: runtime.OpClose, SessionID: "s"}, `tui.publish {"properties":{"command":"app.exit"},"type":"tui.command.execute"}`},
		{"v2", runtime.Call{Op: runtime.OpClose, SessionID: "s"}, `bridge.emit {"properties":{"sessionID":"s"},"type":"exit-tab-closed"}`},
		{"v1", runtime.Call{Op: runtime.OpToast, Title: "thatch", Text: "m", Variant: "info"}, `tui.showToast {"message":"m","title":"thatch","variant":"info"}`},
		{"v2", runtime.Call{Op: runtime.OpToast, Title: "thatch", Text: "m", Variant: "warning"}, `bridge.emit {"properties":{"message":"m","title":"thatch","variant":"warning"},"type":"toast"}`},
	} {
		req, err := Encode(tc.api, tc.call)
		if err != nil {
			t.Fatal(err)
		}
		params, _ := json.Marshal(req.Params)
		if got := req.Method + " " + string(params); got != tc.want {
			t.Errorf("%s %s:\n got %s\nwant %s", tc.api, tc.call.Op, got, tc.want)
		}
	}
	if _, err := Encode("v1", runtime.Call{Op: "nope"}); err == nil {
		t.Error("an unknown operation encoded")
	}
}

func TestDecodeMessages(t *testing.T) {
	v1 := `[{"info":{"id":"m1","role":"user"},"parts":[{"type":"text","text":"hi"}]},{"info":{"id":"m2","role":"assistant"},"parts":[{"type":"reasoning"},{"type":"text","text":"ok\nTHATCH_EXIT_READY"}]}]`
	v2 := `{"messages":[{"id":"m1","role":"user","content":[{"type":"text","text":"hi"}]},{"id":"m2","role":"assistant","content":[{"type":"reasoning"},{"type":"text","text":"ok\nTHATCH_EXIT_READY"}]}]}`
	for api, raw := range map[string]string{"v1": v1, "v2": v2} {
		var res runtime.Result
		if err := Decode(api, runtime.Call{Op: runtime.OpMessages}, json.RawMessage(raw), &res); err != nil {
			t.Fatalf("%s: %v", api, err)
		}
		if len(res.Messages) != 2 || res.Messages[1].Info.Role != "assistant" || res.Messages[1].Info.ID != "m2" {
			t.Fatalf("%s: decoded %+v", api, res.Messages)
		}
		if !runtime.Greenlit(res.Messages, "THATCH_EXIT_READY") {
			t.Errorf("%s: the token was lost in the mapping", api)
		}
	}
	var res runtime.Result
	if err := Decode("v2", runtime.Call{Op: runtime.OpMessages}, json.RawMessage(v1), &res); err == nil {
		t.Error("a v1 shape from a v2 host decoded without error")
	}
	if err := Decode("v1", runtime.Call{Op: runtime.OpCreate}, json.RawMessage(`{"title":"x"}`), &res); err == nil {
		t.Error("a created session without an id decoded")
	}
}
