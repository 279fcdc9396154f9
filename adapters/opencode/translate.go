package opencode

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/thatch-dev/thatch/runtime"
	"github.com/thatch-dev/thatch/runtime/protocol"
)

// Event is one protocol event to publish.
type Event struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Properties json.RawMessage `json:"properties"`
}

// Body is the event's JSON body.
func (e Event) Body() []byte {
	data, _ := json.Marshal(e)
	return data
}

// frame is a /global/event frame (or a bare /event one).
type frame struct {
	Directory string          `json:"directory"`
	Payload   json.RawMessage `json:"payload"`
}

// part is a message part, as message.part.updated and GET /session/{id}/message carry it.
type part struct {
	Type      string `json:"type"`
	SessionID string `json:"sessionID"`
	CallID    string `json:"callID"`
	Tool      string `json:"tool"`
	State     struct {
		Status   string          `json:"status"`
		Input    json.RawMessage `json:"input"`
		Output   string          `json:"output"`
		Title    string          `json:"title"`
		Metadata json.RawMessage `json:"metadata"`
	} `json:"state"`
}

// ToolEventID is the event id of a finished tool call, whichever way the bridge learns
// of it (the event stream, the catch-up, the plugin shim's hook), so that thatch applies
// the call once. Call ids come from the model's provider, and some count from 1 in every
// process: they are unique within a session at best, so the id names the session too.
func ToolEventID(sessionID, callID string) string {
	return "tool_" + sessionID + "_" + callID
}

// toolEvent is the tool.execute.after of a completed tool part. Its id, ToolEventID, is
// the same however often the part is seen, so thatch applies it once.
func (p part) toolEvent() (Event, bool) {
	if p.Type != "tool" || p.State.Status != "completed" || p.CallID == "" || p.SessionID == "" {
		return Event{}, false
	}
	args := p.State.Input
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	props, _ := json.Marshal(map[string]any{"sessionID": p.SessionID, "callID": p.CallID, "tool": p.Tool,
		"args": args, "title": p.State.Title, "output": p.State.Output, "metadata": rawOr(p.State.Metadata, "{}")})
	return Event{ID: ToolEventID(p.SessionID, p.CallID), Type: protocol.EventToolExecuteAfter, Properties: props}, true
}

// Translate turns one server-sent event's data into the protocol events to publish: the
// types thatch acts on pass through as they are; a completed tool part becomes
// tool.execute.after, with id ToolEventID(sessionID, callID) so a repeated update of the same part is
// one event; everything else (deltas, heartbeats, sync frames) is dropped.
func Translate(data []byte) ([]Event, error) {
	var f frame
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("an event frame that is not JSON: %w", err)
	}
	payload := f.Payload
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = data // GET /event frames are the bare event
	}
	var ev Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("an event that is not {id, type, properties}: %w", err)
	}
	switch {
	case ev.Type == "message.part.updated":
		var tp struct {
			Part part `json:"part"`
		}
		if err := json.Unmarshal(ev.Properties, &tp); err != nil {
			return nil, nil // a part of another shape: not a tool call
		}
		if ev, ok := tp.Part.toolEvent(); ok {
			return []Event{ev}, nil
		}
		return nil, nil
	case ev.ID == "" || !runtime.Known(ev.Type):
		return nil, nil
	}
	return []Event{ev}, nil
}

func rawOr(raw json.RawMessage, def string) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage(def)
	}
	return raw
}
