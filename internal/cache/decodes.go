package cache

import (
	"slices"
	"sync"
	"time"
)

// decodes lists the decoding requests of one pod (Reservation.Decoding): when each began
// decoding and how many tokens it may generate, for predictions of when each frees its
// slot (Pod.DecodeEnd).
type decodes struct {
	mu   sync.Mutex
	list []decodeSpan
}

// decodeSpan is one request's decode: its start (loadClock) and its max tokens (0: not
// set).
type decodeSpan struct {
	start, maxTokens int64
}

// begin moves r from reserved to decoding and lists its decode, of maxTokens at most,
// as starting at start, unless r has already left reserved (a second call, or released).
func (d *decodes) begin(r *Reservation, start, maxTokens int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !r.state.CompareAndSwap(reserved, decoding) {
		return
	}
	r.decode = decodeSpan{start, maxTokens}
	d.list = append(d.list, r.decode)
}

// end drops the decode of r, which was decoding.
func (d *decodes) end(r *Reservation) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i := slices.Index(d.list, r.decode); i >= 0 {
		last := len(d.list) - 1
		d.list[i] = d.list[last]
		d.list = d.list[:last]
	}
}

// Decoding records that the engine began the answer: the first token of a streamed
// answer arrived, so the request now decodes in the engine's batch, for maxTokens output
// tokens at most (0: the request set no bound), and will free its slot once decoded
// (Pod.DecodeEnd). Only the first call before Release counts.
func (r *Reservation) Decoding(maxTokens int64) {
	r.pod.state.decodes.begin(r, loadNow(), max(maxTokens, 0))
}

// DecodeEnd returns how long, as of now, until the k-th (from 1) of the pod's decoding
// requests (Reservation.Decoding) to finish is expected to, and its rank: k, or how many
// decode when fewer do, the wait being then the last's; rank 0 when none decodes. A
// request is expected to decode for decode seconds, the engine's mean, or for its max
// tokens at perToken seconds each where that is shorter. The wait is 0 for a request
// past its expected end.
func (p *Pod) DecodeEnd(now time.Time, k int, perToken, decode float64) (time.Duration, int) {
	d := &p.state.decodes
	var buf [64]int64
	d.mu.Lock()
	ends := buf[:0]
	for _, dc := range d.list {
		t := decode
		if dc.maxTokens > 0 {
			t = min(t, float64(dc.maxTokens)*perToken)
		}
		ends = append(ends, dc.start+int64(t*float64(time.Second)))
	}
	d.mu.Unlock()
	rank := min(k, len(ends))
	if rank <= 0 {
		return 0, 0
	}
	slices.Sort(ends)
	return time.Duration(max(ends[rank-1]-loadClock(now), 0)), rank
}
