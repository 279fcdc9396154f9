package runtime

import "time"

// Journal is where the driver persists state. Commit writes one Batch atomically: the
// state rows the effects touched, the entry changes, the outbox calls, the applied event
// ids, the dead letters, the finished outbox calls and the consumer position.
type Journal interface {
	// Load rebuilds the state and returns the outbox calls not yet performed and the
	// consumer position.
	Load() (*State, []Call, uint64, error)
	// Applied returns which of ids were applied already.
	Applied(ids []string) (map[string]bool, error)
	// Commit persists b and assigns outbox ids to b.Effects.Calls.
	Commit(b *Batch) error
	// PayloadEntries reads what a payload shows of the entries of root claimed by
	// claimant, oldest first: tool, title, output, and args cut to PayloadArgsMax+1
	// characters; not the metadata. The driver calls it after the claim's commit from
	// other goroutines, several at once: it must see every committed transaction and
	// must not hold up Commit.
	PayloadEntries(root, claimant string) ([]PayloadEntry, error)
	// Instance names this journal for good: with an outbox id it makes a call's
	// idempotency key.
	Instance() string
}

// Batch is one journal transaction.
type Batch struct {
	Now         time.Time
	State       *State
	Effects     *Effects
	Applied     []Applied
	DeadLetters []DeadLetter
	Done        []int64 // outbox ids performed
	StreamSeq   uint64  // consumer position after the batch; 0 leaves it
	// PruneApplied, when set, drops applied event ids recorded before it: the stream
	// cannot redeliver events that old.
	PruneApplied time.Time
}

// Empty reports whether b writes nothing: no effects, applied or dead-lettered events,
// performed calls, position or pruning. The loop does not commit it.
func (b *Batch) Empty() bool {
	return (b.Effects == nil || b.Effects.Empty()) && len(b.Applied) == 0 && len(b.DeadLetters) == 0 &&
		len(b.Done) == 0 && b.StreamSeq == 0 && b.PruneApplied.IsZero()
}

// Applied is one applied event id.
type Applied struct {
	ID  string
	Seq uint64
}

// DeadLetter is one rejected message.
type DeadLetter struct {
	Seq     uint64
	Subject string
	Reason  string
	Body    []byte
}
