package runtime

import "log/slog"

// FollowStream makes id the stream the state counts in. When it replaces another one (the
// stream was deleted and created again: a lost store, another broker), the sessions' Seq
// watermarks belong to the old numbering and are reset, or every event of the new stream
// would be taken for a stale one; the driver resets its position too. Step calls it for a
// StreamSwitch. It reports whether it replaced a stream.
func FollowStream(s *State, id string, fx *Effects) bool {
	old := s.Counters.Stream
	s.Counters.Stream = id
	fx.Counters = true
	if old == "" {
		return false // the first stream this journal knows
	}
	for _, sess := range s.Sessions {
		if sess.Seq != 0 {
			sess.Seq = 0
			fx.Sessions[sess.ID] = true
		}
	}
	fx.Notes = append(fx.Notes, Note{Level: slog.LevelWarn, Msg: "the event stream was created again (deleted, a lost broker store, or another broker): following its sequence from here",
		Attrs: []any{"old_stream_created", old, "new_stream_created", id}})
	return true
}
