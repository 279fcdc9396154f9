package opencode

import (
	"sync"
	"time"

	"github.com/thatch-dev/thatch/adapters/natsbus"
)

// link is the connection to opencode's event stream as status shows it: whether it is
// open, since when, and why the last attempt failed while it is not.
type link struct {
	mu        sync.Mutex
	connected bool      // the event stream is open, or was last time it was tried
	since     time.Time // when connected last changed, or Run started
	err       string    // why the last attempt failed, while not connected
}

// connecting starts the clock of a link that has not been tried yet.
func (l *link) connecting() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since = time.Now()
}

// reachable records that opencode's event stream is open.
func (l *link) reachable() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.connected {
		l.connected, l.since = true, time.Now()
	}
	l.err = ""
}

// unreachable records that opencode's event stream could not be opened: since counts
// from the first failure of the outage, err is the last one's (credentials redacted).
func (l *link) unreachable(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.connected {
		l.connected, l.since = false, time.Now()
	}
	if err != nil {
		l.err = natsbus.RedactURLs(err.Error())
	}
}

// state returns the link as it is now.
func (l *link) state() (connected bool, since time.Time, err string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connected, l.since, l.err
}
