package runtime

import "sync"

// decoder decodes the consumer's deliveries beside the loop, in arrival order, so that
// decoding, a quarter of the loop's work per event, overlaps the loop's commits instead
// of preceding them. The loop takes what it decoded from out.
type decoder struct {
	in  chan Delivery // where the consumer hands messages over (Loop.Deliveries)
	out chan Delivery // decoded, in arrival order
}

func newDecoder() decoder {
	return decoder{in: make(chan Delivery, 1024), out: make(chan Delivery, 512)}
}

// start starts the decoder's goroutine for events under prefix, whose tool events' bodies
// rules prepares. The function it returns stops it and waits for it (once; later calls
// return at once); the delivery it held is handed back.
func (dc *decoder) start(prefix string, rules *Rules) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			var d Delivery
			select {
			case <-stop:
				return
			case d = <-dc.in:
			}
			d.ev, d.evErr = DecodeEvent(prefix, d.Subject, d.Data)
			d.decoded = true
			if d.evErr == nil && d.ev.Tool != nil && !ownTool(d.ev.Tool.Tool) {
				rules.PrepareBody(d.ev.Tool) // Rules do not change while the loop runs
			}
			select {
			case dc.out <- d:
			case <-stop:
				if d.Nak != nil {
					_ = d.Nak()
				}
				return
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(stop)
		<-done
	})
}

// handBack returns the deliveries not applied yet, so the next run gets them at once. The
// decoder is stopped.
func (dc *decoder) handBack() {
	for {
		var d Delivery
		select {
		case d = <-dc.out:
		case d = <-dc.in:
		default:
			return
		}
		if d.Nak != nil {
			_ = d.Nak()
		}
	}
}
