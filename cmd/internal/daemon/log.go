package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/thatch-dev/thatch/adapters/natsbus"
)

// redactingHandler hides the credentials of every URL in a log line: the message, string
// attributes, errors and Stringers, in groups too, show scheme://REDACTED@host. A URL
// that carries credentials (THATCH_NATS_URL, THATCH_OPENCODE_URL, a host's) may reach a
// log through any part, an error message of a library included; this is the one place
// that catches them all.
type redactingHandler struct{ next slog.Handler }

func (h redactingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, natsbus.RedactURLs(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = redactAttr(a)
	}
	return redactingHandler{h.next.WithAttrs(red)}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{h.next.WithGroup(name)}
}

// redactAttr is a with the credentials of its URLs hidden. Values of other kinds (numbers,
// times, structs that are neither errors nor Stringers) stay as they are.
func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); natsbus.RedactURLs(s) != s {
			return slog.String(a.Key, natsbus.RedactURLs(s))
		}
	case slog.KindGroup:
		group := v.Group()
		red := make([]slog.Attr, len(group))
		for i, g := range group {
			red[i] = redactAttr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(red...)}
	case slog.KindAny:
		var s string
		switch x := v.Any().(type) {
		case error:
			s = x.Error()
		case fmt.Stringer:
			s = x.String()
		default:
			return slog.Attr{Key: a.Key, Value: v}
		}
		if red := natsbus.RedactURLs(s); red != s {
			return slog.String(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
