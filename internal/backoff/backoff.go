package backoff

import (
	"cmp"
	"time"
)

// The waits of a zero Backoff: a broker, a journal or an opencode that comes back is
// noticed soon, and one that stays away is asked at a calm pace.
const (
	DefaultFirst = 250 * time.Millisecond
	DefaultMax   = 5 * time.Second
)

// Backoff gives the waits between the attempts of a series: First, then twice the last
// wait, never more than Max (First itself is not bounded by Max). Zero fields take the
// defaults above. It is not safe for concurrent use; the goroutine that retries owns it.
type Backoff struct {
	First, Max time.Duration

	last time.Duration // the wait Next gave last, 0 before the series' first attempt
}

// Next returns the wait before the next attempt, and doubles the one after it.
func (b *Backoff) Next() time.Duration {
	if b.last == 0 {
		b.last = cmp.Or(b.First, DefaultFirst)
	} else {
		b.last = min(2*b.last, cmp.Or(b.Max, DefaultMax))
	}
	return b.last
}

// Reset starts the series over: the next wait is First again. Call it when an attempt
// succeeds.
func (b *Backoff) Reset() { b.last = 0 }

// Retrying says whether Next was called since the series began (or was Reset), that is
// whether an attempt of this series failed already.
func (b *Backoff) Retrying() bool { return b.last != 0 }
