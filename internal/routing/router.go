package routing

import (
	"errors"
	"fmt"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
)

// Router settles RoutingContexts: it resolves each with a reserved Target or rejects it.
// A synchronous router has settled the context when Route returns; an asynchronous one
// may settle it later, from another goroutine.
type Router interface {
	Route(rc *RoutingContext)
}

// Reserver reserves endpoints for requests; the gateway's cache view provides one.
type Reserver interface {
	// TryReserveInto counts one request with tokensIn prompt tokens on p and on m into
	// r, an unused Reservation, if p has fewer than limit requests in flight (limit <= 0:
	// no limit), in one atomic step.
	TryReserveInto(r *cache.Reservation, m *cache.Model, p *cache.Pod, limit, tokensIn int64) bool
}

// Options configure how a router turns a Picker's choice into a reservation.
type Options struct {
	// Reserver reserves the chosen endpoint. Required.
	Reserver Reserver
	// Fallback decides when the Picker returns ErrUndecided; nil rejects such requests.
	Fallback Picker
	// StaleAfter is the age beyond which an endpoint's metrics are unknown to the
	// algorithms. Required.
	StaleAfter time.Duration
	// MaxInFlight caps the requests in flight on one endpoint; 0 means no cap. Endpoints
	// at the cap are not offered to the Picker.
	MaxInFlight int64
	// Admission, if set, is told of every release of the router's targets, so that the
	// requests waiting for capacity (NewQueue) are routed again. Every router that shares
	// endpoints with a queueing one needs it. Required by NewQueue.
	Admission *Admission
}

// maxAttempts bounds how often a decision is retried because the chosen endpoint's load
// grew between reading it and reserving it. The last attempt reserves regardless of
// that growth (within MaxInFlight), so a request never fails for losing races.
const maxAttempts = 32

// errAllBusy means every candidate is at MaxInFlight.
var errAllBusy = errors.New("every candidate is at its concurrency limit")

// selector selects and reserves an endpoint in one step.
type selector struct {
	picker Picker
	// pods is picker as a PodPicker, nil when it is not one.
	pods    PodPicker
	learner Learner
	opts    Options
}

func newSelector(p Picker, opts Options) selector {
	learner, _ := p.(Learner)
	pods, _ := p.(PodPicker)
	return selector{picker: p, pods: pods, learner: learner, opts: opts}
}

// readsPrompt reports whether the picker or the fallback reads the prompt's text.
func (s selector) readsPrompt() bool {
	return ReadsPrompt(s.picker) || ReadsPrompt(s.opts.Fallback)
}

// selectAndReserve picks an endpoint for rc and reserves it. The reservation succeeds
// only if the endpoint's in-flight count is still the one the algorithm saw; otherwise
// the algorithm decides again with fresh counts. A burst of concurrent decisions
// therefore spreads over endpoints as if they had been made one after another.
// It returns errAllBusy when every candidate is at MaxInFlight.
func (s selector) selectAndReserve(rc *RoutingContext) (*Target, error) {
	if len(rc.Candidates) == 0 {
		return nil, ErrNoEndpoints
	}
	if s.pods != nil {
		if t, ok := s.reservePod(rc); ok {
			return t, nil
		}
	}
	cands := make([]Candidate, 0, len(rc.Candidates))
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		cands = s.candidates(rc, cands[:0])
		if len(cands) == 0 {
			return nil, errAllBusy
		}
		i, err := s.pick(rc, cands)
		if err != nil {
			return nil, err
		}
		if i < 0 || i >= len(cands) {
			return nil, fmt.Errorf("routing algorithm chose candidate %d of %d", i, len(cands))
		}
		if t, ok := s.reserve(rc, cands[i].Pod, cands[i].InFlight, attempt); ok {
			return t, nil
		}
	}
	return nil, errAllBusy
}

// reservePod is selectAndReserve through PodPicker.PickPod. It reports false when
// PickPod declines or every attempt lost its race, for the Candidate path to decide.
func (s selector) reservePod(rc *RoutingContext) (*Target, bool) {
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		i, seen, ok := s.pods.PickPod(rc, Eligibility{Limit: s.opts.MaxInFlight, StaleAfter: s.opts.StaleAfter})
		if !ok {
			return nil, false
		}
		if i < 0 || i >= len(rc.Candidates) {
			return nil, false
		}
		if t, ok := s.reserve(rc, rc.Candidates[i], seen, attempt); ok {
			return t, true
		}
	}
	return nil, false
}

// reserve reserves p for rc if its in-flight count is still seen — on the last attempt,
// if it is below MaxInFlight — and lets the learner learn the choice. The Target is rc's
// own: a context is resolved at most once.
func (s selector) reserve(rc *RoutingContext, p *cache.Pod, seen int64, attempt int) (*Target, bool) {
	limit := seen + 1
	if attempt == maxAttempts {
		limit = s.opts.MaxInFlight
	}
	t := &rc.slot
	if !s.opts.Reserver.TryReserveInto(&t.reservation, rc.Model, p, limit, rc.PromptTokens) {
		return nil, false
	}
	t.Pod, t.admission = p, s.opts.Admission
	if s.learner != nil {
		t.receipt, t.learner, t.rc = s.learner.Learn(rc, p), s.learner, rc
	}
	return t, true
}

// candidates appends to dst the candidates of rc below MaxInFlight, with their current
// in-flight counts and fresh metrics.
func (s selector) candidates(rc *RoutingContext, dst []Candidate) []Candidate {
	for _, p := range rc.Candidates {
		n := p.Load().InFlight()
		if s.opts.MaxInFlight > 0 && n >= s.opts.MaxInFlight {
			continue
		}
		dst = append(dst, Candidate{Pod: p, InFlight: n, Metrics: p.FreshMetrics(rc.Now, s.opts.StaleAfter)})
	}
	return dst
}

// pick asks the picker, then the fallback if the picker cannot decide.
func (s selector) pick(rc *RoutingContext, cands []Candidate) (int, error) {
	i, err := s.picker.Pick(rc, cands)
	if errors.Is(err, ErrUndecided) && s.opts.Fallback != nil {
		i, err = s.opts.Fallback.Pick(rc, cands)
	}
	if err != nil {
		return 0, fmt.Errorf("route %s: %w", rc.Request.Model, err)
	}
	return i, nil
}

// NewRouter returns a synchronous Router that selects with p and reserves in the same
// step. When every candidate is at opts.MaxInFlight it rejects with ErrQueueFull; use
// NewQueue to wait for capacity instead.
func NewRouter(p Picker, opts Options) Router {
	return syncRouter{sel: newSelector(p, opts)}
}

type syncRouter struct{ sel selector }

// ReadsPrompt reports whether the router's algorithm or its fallback reads the prompt's
// text.
func (r syncRouter) ReadsPrompt() bool { return r.sel.readsPrompt() }

func (r syncRouter) Route(rc *RoutingContext) {
	t, err := r.sel.selectAndReserve(rc)
	if errors.Is(err, errAllBusy) {
		err = ErrQueueFull
	}
	settle(rc, t, err)
}
