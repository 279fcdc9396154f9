package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Error is a reply's error, {"name": …, "message": …}: Name is one of the error names
// below, or a host's own. NoResponder is never sent: the requester sets it when nobody
// served the subject (NoResponder, the name), so that a method the host does not serve
// is told apart from one that failed.
type Error struct {
	Name        string `json:"name"`
	Message     string `json:"message"`
	NoResponder bool   `json:"-"`
}

func (e *Error) Error() string { return e.Name + ": " + e.Message }

// Encode returns the reply bytes: {"error": err} when err is not nil, else
// {"result": result} (a nil result is {"result":null}). Only a result can fail to
// encode.
func Encode(result any, err *Error) ([]byte, error) {
	var b bytes.Buffer
	if e := EncodeTo(&b, result, err); e != nil {
		return nil, e
	}
	return b.Bytes(), nil
}

// EncodeTo appends Encode's bytes to b, and nothing when it fails: a responder that
// reuses b allocates nothing for a reply of a size it sent before.
func EncodeTo(b *bytes.Buffer, result any, err *Error) error {
	var v any = struct {
		Result any `json:"result"`
	}{result}
	if err != nil {
		v = struct {
			Error *Error `json:"error"`
		}{err}
	}
	if e := json.NewEncoder(b).Encode(v); e != nil { // writes only what encoded
		return e
	}
	b.Truncate(b.Len() - 1) // the newline Encode ends with
	return nil
}

// ErrBadReply is wrapped by Decode's error for bytes that are neither {"result": …} nor
// {"error": …}.
var ErrBadReply = errors.New("a reply that is neither {result} nor {error}")

// Decode reads reply bytes: the result as raw JSON (a null result is the bytes null,
// never nil), or the reply's error; an error wins over a result. err, wrapping
// ErrBadReply, says the bytes are neither.
func Decode(data []byte) (result json.RawMessage, replyErr *Error, err error) {
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadReply, err)
	}
	switch {
	case env.Error != nil:
		return nil, env.Error, nil
	case env.Result != nil:
		return env.Result, nil, nil
	}
	return nil, nil, ErrBadReply
}
