package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/thatch-dev/thatch/runtime/protocol"
)

// MaxEventBytes is the largest event body thatch accepts.
const MaxEventBytes = 1 << 20

var hostIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidHostID reports whether id is a protocol host id.
func ValidHostID(id string) bool { return hostIDPattern.MatchString(id) }

// Event is one decoded host bus event.
type Event struct {
	ID      string // the event id: applied at most once
	Type    string
	HostID  string
	Seq     uint64 // stream sequence
	HostSeq int64  // Host-Seq header, 0 when absent

	SessionID string
	Info      *SessionInfo // session.created/updated/deleted
	Status    Status       // session.status
	Error     *ErrorInfo   // session.error
	Tool      *ToolExec    // tool.execute.after
	Command   string       // command.execute.before (command), command.executed (name)
	Arguments string
	MessageID string
	Hello     *Hello // host.hello
	BootID    string // host.hello, host.goodbye
}

// SessionInfo is the part of opencode's Session object thatch uses.
type SessionInfo struct {
	ID        string `json:"id"`
	ParentID  string `json:"parentID,omitempty"`
	Title     string `json:"title"`
	Directory string `json:"directory"`
	ProjectID string `json:"projectID,omitempty"`
}

// ErrorInfo is a session error as opencode reports it.
type ErrorInfo struct {
	Name string `json:"name"`
	Data struct {
		Message string `json:"message"`
	} `json:"data"`
}

// ToolExec is one finished tool call, from the tool.execute.after plugin hook.
type ToolExec struct {
	CallID   string          `json:"callID"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	Title    string          `json:"title"`
	Output   string          `json:"output"`
	Metadata json.RawMessage `json:"metadata"`

	// The journal's body of it for an OutputMax of preparedMax, and its redactions, made
	// beside the loop by its decoder (Rules.PrepareBody); nil when not made.
	prepared    *Body
	redactions  int
	preparedMax int
}

// Hello is a host's announcement of itself.
type Hello struct {
	HostID    string       `json:"hostID"`
	API       string       `json:"api"`
	Version   string       `json:"version"`
	BootID    string       `json:"bootID"`
	Directory string       `json:"directory"`
	Worktree  string       `json:"worktree"`
	ProjectID string       `json:"projectID"`
	Caps      Capabilities `json:"capabilities"`
	Resumed   []string     `json:"resumed"`
	// SmallModel (an extension): the host's model for cheap background work,
	// "provider/model" (opencode's small_model).
	SmallModel string `json:"smallModel,omitempty"`
	// MissingTools (an extension): thatch's tools the host has not loaded (its plugin is
	// missing or older than this thatch). An extraction child could not call them.
	MissingTools []string `json:"missingTools,omitempty"`
}

// ParseModel splits "provider/model" (the model part may hold more slashes, as
// "openrouter/anthropic/claude-3.5-haiku" does). ok is false for anything else.
func ParseModel(s string) (provider, model string, ok bool) {
	provider, model, ok = strings.Cut(s, "/")
	if !ok || provider == "" || model == "" || len(s) > 256 || strings.ContainsAny(s, " ,\t\r\n") {
		return "", "", false
	}
	return provider, model, true
}

// ErrBadEvent is wrapped by every DecodeEvent error: the message is rejected, not retried.
var ErrBadEvent = errors.New("bad event")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadEvent, fmt.Sprintf(format, args...))
}

// Known reports whether thatch acts on events of type t.
func Known(t string) bool {
	switch t {
	case protocol.EventHostHello, protocol.EventHostGoodbye,
		protocol.EventSessionCreated, protocol.EventSessionUpdated, protocol.EventSessionDeleted,
		protocol.EventSessionStatus, protocol.EventSessionIdle, protocol.EventSessionError,
		protocol.EventSessionCompacting, protocol.EventSessionCompacted,
		protocol.EventToolExecuteAfter, protocol.EventCommandExecuteBefore, protocol.EventCommandExecuted:
		return true
	}
	return false
}

// DecodeEvent decodes one message of subject prefix.<host>.event.<type>. A body that is
// not a JSON object with string id and type, a body over MaxEventBytes, or properties of
// the wrong shape for a known type is an error wrapping ErrBadEvent. Unknown types decode
// without their properties; the caller ignores them.
func DecodeEvent(prefix, subject string, data []byte) (Event, error) {
	return decodeEvent(prefix, subject, data, unmarshal)
}

// unmarshal is json.Unmarshal, faster: go-json-experiment's v1 (encoding/json as it is
// reimplemented on encoding/json/v2) decodes in one pass what encoding/json validates and
// then decodes, and every tool event is decoded on the loop's path. Whatever it refuses is
// decoded again by encoding/json, which decides: an error, its message and the fields a
// partial decode set are encoding/json's (FuzzDecodeEvent compares the two on every input).
func unmarshal[T any](data []byte, v *T) error {
	if jsonv1.Unmarshal(data, v) == nil {
		return nil
	}
	*v = *new(T)
	return json.Unmarshal(data, v)
}

func decodeEvent(prefix, subject string, data []byte, decode func([]byte, *envelope) error) (Event, error) {
	var ev Event
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return ev, bad("subject %q is not under %q", subject, prefix)
	}
	// The type in the body wins over the subject's tail, so the tail is not read.
	host, _, ok := strings.Cut(rest, ".event.")
	if !ok || !ValidHostID(host) {
		return ev, bad("subject %q is not %s.<host>.event.<type> with a host id of 1-64 [A-Za-z0-9_-]", subject, prefix)
	}
	ev.HostID = host
	if len(data) > MaxEventBytes {
		return ev, bad("body of %d bytes is over the %d-byte limit", len(data), MaxEventBytes)
	}
	// One pass decodes the envelope and the union of every known type's properties.
	var env envelope
	err := decode(data, &env)
	var typeErr *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &typeErr) {
		return ev, bad("body is not a JSON object: %v", err)
	}
	if typeErr != nil && (typeErr.Field == "id" || typeErr.Field == "type" || typeErr.Field == "") {
		return ev, bad("body is not a JSON object with string id and type: %v", err)
	}
	if env.ID == nil || *env.ID == "" {
		return ev, bad("body has no string id")
	}
	if env.Type == nil || *env.Type == "" {
		return ev, bad("body has no string type")
	}
	ev.ID, ev.Type = *env.ID, *env.Type
	if !Known(ev.Type) {
		return ev, nil // acknowledged and ignored, whatever its properties hold
	}
	if typeErr != nil && typeErr.Field == "properties" {
		return ev, bad("%s properties is not an object", ev.Type)
	}
	if typeErr != nil {
		return ev, bad("%s properties of the wrong shape: %s is %s, not %s", ev.Type,
			strings.TrimPrefix(typeErr.Field, "properties."), typeErr.Value, typeErr.Type)
	}
	p := env.Props
	if p == nil {
		p = &properties{}
	}
	if err := p.into(&ev); err != nil {
		return ev, bad("%s properties: %v", ev.Type, err)
	}
	return ev, nil
}

// envelope is an event's body.
type envelope struct {
	ID    *string     `json:"id"`
	Type  *string     `json:"type"`
	Props *properties `json:"properties"`
}

// properties is the union of the properties of every known event type.
type properties struct {
	SessionID *string                `json:"sessionID"`
	Info      *SessionInfo           `json:"info"`
	Status    *struct{ Type string } `json:"status"`
	Error     *ErrorInfo             `json:"error"`
	Command   string                 `json:"command"`
	Name      string                 `json:"name"`
	Arguments json.RawMessage        `json:"arguments"`
	MessageID string                 `json:"messageID"`
	ToolExec                         // tool.execute.after
	Hello                            // host.hello, host.goodbye
}

// into checks the properties of ev's type and copies them into ev.
func (p *properties) into(ev *Event) error {
	if p.SessionID != nil {
		ev.SessionID = *p.SessionID
	}
	need := func() error {
		if ev.SessionID == "" {
			return errors.New("sessionID is missing")
		}
		return nil
	}
	switch ev.Type {
	case protocol.EventHostHello:
		if p.BootID == "" {
			return errors.New("bootID is missing")
		}
		hello := p.Hello
		if hello.API == "" {
			hello.API = "v1"
		}
		if hello.API != "v1" && hello.API != "v2" {
			return fmt.Errorf("api %q is neither v1 nor v2", hello.API)
		}
		ev.Hello, ev.BootID = &hello, p.BootID
	case protocol.EventHostGoodbye:
		ev.BootID = p.BootID
	case protocol.EventSessionCreated, protocol.EventSessionUpdated, protocol.EventSessionDeleted:
		if p.Info == nil || p.Info.ID == "" {
			return errors.New("info with a string id is missing")
		}
		if ev.SessionID == "" {
			ev.SessionID = p.Info.ID
		}
		if ev.SessionID != p.Info.ID {
			return fmt.Errorf("sessionID %q differs from info.id %q", ev.SessionID, p.Info.ID)
		}
		ev.Info = p.Info
	case protocol.EventSessionStatus:
		if err := need(); err != nil {
			return err
		}
		if p.Status == nil || p.Status.Type == "" {
			return errors.New("status.type is missing")
		}
		switch p.Status.Type {
		case "idle":
			ev.Status = StatusIdle
		case "busy", "retry":
			ev.Status = StatusBusy
		default:
			return fmt.Errorf("status.type %q is not idle, busy or retry", p.Status.Type)
		}
	case protocol.EventSessionIdle, protocol.EventSessionCompacting, protocol.EventSessionCompacted:
		return need()
	case protocol.EventSessionError:
		ev.Error = p.Error
	case protocol.EventToolExecuteAfter:
		if err := need(); err != nil {
			return err
		}
		if p.CallID == "" || p.Tool == "" {
			return errors.New("callID and tool are required")
		}
		if a := bytes.TrimSpace(p.Args); len(a) > 0 && !bytes.Equal(a, []byte("null")) && a[0] != '{' {
			return errors.New("args is not an object")
		}
		tool := p.ToolExec
		ev.Tool = &tool
	case protocol.EventCommandExecuteBefore, protocol.EventCommandExecuted:
		if err := need(); err != nil {
			return err
		}
		ev.Command = p.Command
		if ev.Type == protocol.EventCommandExecuted {
			ev.Command = p.Name
		}
		ev.Command = strings.TrimPrefix(ev.Command, "/")
		if ev.Command == "" {
			return errors.New("command name is missing")
		}
		ev.Arguments = rawString(p.Arguments)
		ev.MessageID = p.MessageID
	}
	return nil
}

func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// WrapUpFor returns the wrap-up a command name arms, or WrapNone.
func WrapUpFor(command string) WrapUp {
	switch strings.TrimPrefix(command, "/") {
	case "thatch/compact":
		return WrapCompact
	case "thatch/exit":
		return WrapExit
	}
	return WrapNone
}
