package runtime

// DecodedWaiting is how many deliveries the decoder handed to the loop that the loop has not
// taken yet: a test that holds the loop waits for it to know that the next round takes them
// together (the decoder runs beside the loop, so a delivery may still be in its hands).
func (l *Loop) DecodedWaiting() int { return len(l.decoder.out) }
