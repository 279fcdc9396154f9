package team

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestRefusedProject: the project of a publish the team's server refused, from nats.go's
// error as it reports it; anything else is no project.
func TestRefusedProject(t *testing.T) {
	violation := func(s string) error { return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, s) }
	for _, c := range []struct {
		err  error
		want string
	}{
		{violation(`Permissions Violation for Publish to "thatch.team.acme-web.mem_0123456789abcdef0123"`), "acme-web"},
		{violation(`permissions violation for publish to thatch.team.c0ffee.mem_1`), "c0ffee"},
		{violation(`Permissions Violation for Subscription to "thatch.team.acme-web.>"`), ""},
		{violation(`Permissions Violation for Publish to "$JS.API.STREAM.INFO.THATCH_TEAM"`), ""},
		{errors.New(`Permissions Violation for Publish to "thatch.team.acme-web.mem_1"`), ""}, // not nats.go's
		{nats.ErrSlowConsumer, ""},
	} {
		if got := refusedProject(c.err); got != c.want {
			t.Errorf("refusedProject(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestLimiter: one line of a kind per logEvery, the next one counting those held back;
// kinds apart.
func TestLimiter(t *testing.T) {
	var l limiter
	t0 := time.Unix(1_800_000_000, 0)
	steps := []struct {
		key  string
		at   time.Duration
		ok   bool
		held int
	}{
		{"disconnect", 0, true, 0},
		{"disconnect", time.Second, false, 0},
		{"reconnect", time.Second, true, 0},
		{"disconnect", 2 * time.Second, false, 0},
		{"disconnect", logEvery, true, 2},
		{"disconnect", logEvery + time.Second, false, 0},
	}
	for i, s := range steps {
		if ok, held := l.allow(s.key, t0.Add(s.at)); ok != s.ok || held != s.held {
			t.Errorf("step %d (%s at %v): allow = %v, %d; want %v, %d", i, s.key, s.at, ok, held, s.ok, s.held)
		}
	}
}
