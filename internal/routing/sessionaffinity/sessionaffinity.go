package sessionaffinity

import (
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// Defaults applied by New to a zero Config field.
const (
	// DefaultHeader is the request header that carries the session id.
	DefaultHeader = "x-session-id"
	// DefaultTTL is how long a session is remembered after its last request.
	DefaultTTL = 30 * time.Minute
)

// Config configures a Router. The zero value is valid.
type Config struct {
	// Header names the request header carrying the session id; empty means
	// DefaultHeader. Header names are case-insensitive.
	Header string
	// TTL is how long after its last request a session keeps its endpoint; zero or
	// negative means DefaultTTL.
	TTL time.Duration
	// Now returns the current time; nil means the routing context's Now, when routing
	// started, which costs no second read of the clock. Tests inject a clock.
	Now func() time.Time
}

// Router routes each session to one endpoint. It is safe for concurrent use.
//
// For a request with a session id, the Router chooses the endpoint recorded for the
// session if the record is live (used within TTL) and that endpoint is a candidate;
// otherwise the candidate with the highest rendezvous weight xxhash64(id + "\x00" +
// namespace + "/" + name), a choice every replica makes alike. Learn records the endpoint
// that actually served the request, so a session whose endpoint stopped being a
// candidate (it left, or is at its concurrency limit) stays on its new endpoint.
// Sessions are remembered per requested model, up to MaxSessions of them.
//
// Without a session id, Score and Pick return routing.ErrUndecided and Learn records
// nothing.
type Router struct {
	header   string
	now      func() time.Time // nil: the routing context's Now
	sessions *table
}

var (
	_ routing.Scorer    = (*Router)(nil)
	_ routing.PodPicker = (*Router)(nil)
	_ routing.Learner   = (*Router)(nil)
)

// New returns a Router configured by cfg with an empty session table. The choice is
// deterministic, so that replicas agree; rnd is accepted for uniformity with the other
// strategies and not used.
func New(cfg Config, _ routing.Random) *Router {
	if cfg.Header == "" {
		cfg.Header = DefaultHeader
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	return &Router{
		// Canonical once here, so that each Headers.Get need not allocate the canonical form.
		header:   http.CanonicalHeaderKey(cfg.Header),
		now:      cfg.Now,
		sessions: newTable(cfg.TTL, MaxSessions),
	}
}

// Score sets the score of the session's endpoint to 1 and every other candidate's to 0.
// It returns routing.ErrUndecided for a request without a session id.
func (r *Router) Score(rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	i, err := r.Pick(rc, cands)
	if err != nil {
		return err
	}
	clear(scores)
	scores[i] = 1
	return nil
}

// Pick returns the index of the session's endpoint among cands. It returns
// routing.ErrUndecided for a request without a session id.
func (r *Router) Pick(rc *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	i, ok := r.pick(rc, len(cands), func(i int) endpoint.Key { return cands[i].Key }, func(int) bool { return true })
	if !ok {
		return 0, routing.ErrUndecided
	}
	return i, nil
}

// PickPod is Pick straight from the candidates, among those e admits. It declines for a
// request without a session id, for Pick to defer to the fallback.
func (r *Router) PickPod(rc *routing.RoutingContext, e routing.Eligibility) (int, int64, bool) {
	pods := rc.Candidates
	i, ok := r.pick(rc, len(pods), func(i int) endpoint.Key { return pods[i].Key },
		func(i int) bool { return e.Admits(rc.InFlight(i)) })
	if !ok {
		return 0, 0, false
	}
	// Read again: a count grown since only fails the reservation, which decides again.
	return i, rc.InFlight(i), true
}

// pick returns the index of the session's endpoint among n endpoints, sorted by key
// (cache.PodSet), of which key returns each one's key and admitted whether it may be
// chosen: the one the session table names, found by binary search, or else the one
// rendezvous hashing ranks first. It reports false for a request without a session id
// or when no endpoint may be chosen.
func (r *Router) pick(rc *routing.RoutingContext, n int, key func(int) endpoint.Key, admitted func(int) bool) (int, bool) {
	id := rc.Headers.Get(r.header)
	if id == "" {
		return 0, false
	}
	if known, ok := r.sessions.lookup(sessionHash(rc, id), r.clock(rc)); ok {
		i := sort.Search(n, func(i int) bool { return !less(key(i), known) })
		if i < n && key(i) == known && admitted(i) {
			return i, true
		}
	}
	return rendezvous(id, n, key, admitted)
}

// Learn records that chosen served the request's session, starting its TTL anew (a
// session that stays on its endpoint is written at most once per hundredth of TTL). It
// does nothing for a request without a session id. The engine's report corrects nothing
// of it: Learn returns no Receipt.
func (r *Router) Learn(rc *routing.RoutingContext, chosen *cache.Pod) routing.Receipt {
	if id := rc.Headers.Get(r.header); id != "" {
		r.sessions.record(sessionHash(rc, id), chosen.Key, r.clock(rc))
	}
	return nil
}

// clock returns the time the session table is read and written at for rc.
func (r *Router) clock(rc *routing.RoutingContext) time.Time {
	if r.now != nil {
		return r.now()
	}
	return rc.Now
}

// sessionHash returns the table key of session id for rc's requested model.
func sessionHash(rc *routing.RoutingContext, id string) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(rc.Request.Model)
	_, _ = d.WriteString("\x00")
	_, _ = d.WriteString(id)
	return d.Sum64()
}

// rendezvous returns the index of the endpoint with the highest weight for session id
// among the n of which admitted admits, key returning each one's key, breaking
// (astronomically unlikely) equal weights by the smaller key so that the choice does not
// depend on the endpoints' order. It reports false when admitted admits none.
func rendezvous(id string, n int, key func(int) endpoint.Key, admitted func(int) bool) (int, bool) {
	var session xxhash.Digest
	session.Reset()
	_, _ = session.WriteString(id)
	_, _ = session.WriteString("\x00")
	best, bestKey, bestWeight := -1, endpoint.Key{}, uint64(0)
	for i := range n {
		if !admitted(i) {
			continue
		}
		k := key(i)
		w := weight(session, k)
		if best < 0 || w > bestWeight || w == bestWeight && less(k, bestKey) {
			best, bestKey, bestWeight = i, k, w
		}
	}
	return best, best >= 0
}

// weight returns the rendezvous weight of key given session, a digest of the session id
// and a separator. session is a copy, so the caller's digest is not advanced. A rank's
// port is hashed too, so that the ranks of one pod weigh differently.
func weight(session xxhash.Digest, key endpoint.Key) uint64 {
	_, _ = session.WriteString(key.Namespace)
	_, _ = session.WriteString("/")
	_, _ = session.WriteString(key.Name)
	if key.IsRank() {
		var port [12]byte
		_, _ = session.Write(strconv.AppendInt(append(port[:0], ':'), int64(key.Port), 10))
	}
	return session.Sum64()
}

// less orders endpoint keys as the cache sorts candidates (endpoint.Key.Compare).
func less(a, b endpoint.Key) bool { return a.Compare(b) < 0 }
