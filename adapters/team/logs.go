package team

import (
	"errors"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// logEvery is how often one kind of line from the team connection is logged at most: a
// connection that flaps, or a server that refuses every publish, would fill the log.
const logEvery = time.Minute

// maxKeys bounds the kinds of line a limiter remembers.
const maxKeys = 64

// limiter lets one line of each key through per logEvery, counting those it held back.
type limiter struct {
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// allow says whether the line of key may be logged at now, and how many of its lines
// were held back since the last one logged.
func (l *limiter) allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil || len(l.last) >= maxKeys {
		l.last, l.held = map[string]time.Time{}, map[string]int{} // bounded: forgetting only lets a line through again
	}
	if last, ok := l.last[key]; ok && now.Sub(last) < logEvery {
		l.held[key]++
		return false, 0
	}
	held := l.held[key]
	l.last[key], l.held[key] = now, 0
	return true, held
}

var publishViolation = regexp.MustCompile(`(?i)permissions violation for publish to "?([^"\s]+)`)

// refusedProject is the project of a team subject the server refused a publish to, from
// nats.go's asynchronous error, or "" when err is something else.
func refusedProject(err error) string {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return ""
	}
	m := publishViolation.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	rest, ok := strings.CutPrefix(m[1], SubjectPrefix+".")
	if !ok {
		return ""
	}
	project, _, _ := strings.Cut(rest, ".")
	return project
}
