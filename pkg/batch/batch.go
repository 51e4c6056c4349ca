// Package batch gathers what is already queued on a channel into one batch
// without ever waiting for more, so a lone item goes at once and a busy
// sender pays its per-message costs once for many items.
package batch

// Limits bound one batch. A batch always takes at least its first item,
// however big: an item that alone exceeds MaxBytes goes in a batch of its
// own, exactly as it would unbatched.
type Limits struct {
	// MaxItems is the most items in one batch; below 1 counts as 1.
	MaxItems int
	// MaxBytes is the most bytes (as measured by the size function) in one
	// batch of more than one item.
	MaxBytes int
}

// Collect returns first followed by the items already waiting in q, in
// queue order, until q is empty, the batch holds lim.MaxItems items, or the
// next item would take it past lim.MaxBytes. It never blocks.
//
// An item taken from q that does not fit is returned as next with more
// set: the caller must send it before anything else from q (it starts the
// following batch), or the queue order would be lost. A closed q counts as
// empty. The batch is appended to buf[:0], so a sender that reuses one
// buf allocates nothing per batch; it must copy a batch that outlives the
// next call (one that went into a message a transport may still read).
func Collect[T any](buf []T, first T, q <-chan T, lim Limits, size func(T) int) (b []T, next T, more bool) {
	maxItems := max(lim.MaxItems, 1)
	b = append(buf[:0], first)
	if maxItems == 1 {
		return b, next, false
	}
	bytes := size(first)
	for len(b) < maxItems {
		var it T
		var ok bool
		select {
		case it, ok = <-q:
			if !ok {
				return b, next, false
			}
		default:
			return b, next, false
		}
		n := size(it)
		if bytes+n > lim.MaxBytes {
			return b, it, true
		}
		bytes += n
		b = append(b, it)
	}
	return b, next, false
}

// Send hands first and the items queued behind it to send in batches
// (Collect's), carrying an item that did not fit into the next batch,
// until a batch ends because q is empty or MaxItems was reached; then it
// returns, so a caller selecting on other channels too gets its turn. It
// returns buf, grown as needed, for the next call, and send's first error.
func Send[T any](buf []T, first T, q <-chan T, lim Limits, size func(T) int, send func([]T) error) ([]T, error) {
	for {
		b, next, more := Collect(buf, first, q, lim, size)
		buf = b
		if err := send(b); err != nil {
			return buf, err
		}
		if !more {
			return buf, nil
		}
		first = next
	}
}

// Limits of the batches on the gate ⇄ logic Gateway streams, both ways.
const (
	// StreamItems is the most Requests, Closed events or Responses one
	// frame carries. A receiver decodes a whole frame before it handles
	// the first item, so a batch delays its first items by the rest's
	// decoding; past a few dozen small items the per-frame costs saved
	// (an HTTP/2 DATA frame, a marshal call, a reader wake-up) are a few
	// percent of the items' own, so larger batches would add delay and
	// save nothing.
	StreamItems = 64
	// StreamBytes is the most encoded bytes of items in one frame of more
	// than one item: a thirty-second of the 8 MiB message limit both
	// ends of the streams set (rpclimit.MaxMessageBytes), so a batch,
	// framing included, never nears it. A single item larger than this (a
	// request body may inflate to 4 × gate.max_frame_size, a sync page
	// can be large) goes alone, as before batching.
	StreamBytes = 256 << 10
)
