package sessionaffinity_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/sessionaffinity"
)

const ttl = time.Minute

// clock is a settable time source, safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newRouter returns a Router with the default header, TTL ttl and clock c.
func newRouter(c *clock) *sessionaffinity.Router {
	return sessionaffinity.New(sessionaffinity.Config{TTL: ttl, Now: c.Now}, routingtest.SeededRandom(1))
}

// session returns a request in session id; no header if id is empty.
func session(id string) routing.Request {
	req := routing.Request{Headers: http.Header{}}
	if id != "" {
		req.Headers.Set(sessionaffinity.DefaultHeader, id)
	}
	return req
}

// contextOver returns a routing context for req on fleet's model whose candidates are pods.
func contextOver(fleet *routingtest.Fleet, req routing.Request, pods []*cache.Pod) *routing.RoutingContext {
	req.Model = fleet.Model
	m, _ := fleet.Cache.Model(fleet.Model)
	return routing.NewRoutingContext(context.Background(), req, m, cache.NewPodSet(pods))
}

// without returns pods except the one at index skip.
func without(pods []*cache.Pod, skip int) []*cache.Pod {
	return slices.Delete(slices.Clone(pods), skip, skip+1)
}

// pick returns the pod r picks for rc, failing the test on an error or an index out of
// range.
func pick(t testing.TB, r routing.Picker, rc *routing.RoutingContext) *cache.Pod {
	t.Helper()
	cands := routingtest.Candidates(rc)
	i, err := r.Pick(rc, cands)
	if err != nil {
		t.Fatalf("Pick: %v", err)
	}
	if i < 0 || i >= len(cands) {
		t.Fatalf("Pick = %d, want an index in [0, %d)", i, len(cands))
	}
	return cands[i].Pod
}

// route picks for rc and learns the choice, as a router does.
func route(t testing.TB, r *sessionaffinity.Router, rc *routing.RoutingContext) *cache.Pod {
	t.Helper()
	p := pick(t, r, rc)
	r.Learn(rc, p)
	return p
}

// otherThan returns a pod of fleet other than p.
func otherThan(fleet *routingtest.Fleet, p *cache.Pod) *cache.Pod {
	if p == fleet.Pod(0) {
		return fleet.Pod(1)
	}
	return fleet.Pod(0)
}

func TestUndecidedWithoutSessionID(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	tests := []struct {
		name    string
		cfg     sessionaffinity.Config
		headers http.Header
	}{
		{name: "no headers", headers: nil},
		{name: "no session header", headers: http.Header{"X-Other": {"s1"}}},
		{name: "empty session id", headers: http.Header{"X-Session-Id": {""}}},
		{name: "default header when another is configured", cfg: sessionaffinity.Config{Header: "x-conversation"},
			headers: http.Header{"X-Session-Id": {"s1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sessionaffinity.New(tt.cfg, routingtest.SeededRandom(1))
			rc := fleet.Context(routing.Request{Headers: tt.headers})
			cands := routingtest.Candidates(rc)
			if _, err := r.Pick(rc, cands); !errors.Is(err, routing.ErrUndecided) {
				t.Errorf("Pick error = %v, want ErrUndecided", err)
			}
			if err := r.Score(rc, cands, make([]float64, len(cands))); !errors.Is(err, routing.ErrUndecided) {
				t.Errorf("Score error = %v, want ErrUndecided", err)
			}
		})
	}
}

func TestConfiguredHeaderIsCaseInsensitive(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	r := sessionaffinity.New(sessionaffinity.Config{Header: "x-conversation"}, routingtest.SeededRandom(1))
	rc := fleet.Context(routing.Request{Headers: http.Header{"X-Conversation": {"c1"}}})
	pick(t, r, rc)
}

// TestRouterKeepsSessionsOnTheirEndpoint routes through routing.NewRouter: a session
// stays on its endpoint however loaded it gets, and requests without a session id go to
// the fallback.
func TestRouterKeepsSessionsOnTheirEndpoint(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 10)
	affinity := sessionaffinity.New(sessionaffinity.Config{}, routingtest.SeededRandom(1))
	opts := routingtest.Options()
	opts.Fallback = routing.Highest(leastInFlight{}, routingtest.SeededRandom(2))
	router := routing.NewRouter(affinity, opts)
	routeOnce := func(req routing.Request) *cache.Pod {
		return routingtest.Route(t, router, fleet.Context(req)).Pod // never released, so load accumulates
	}

	first := routeOnce(session("s1"))
	for i := range 100 {
		if got := routeOnce(session("s1")); got != first {
			t.Fatalf("request %d of session s1 went to %s, want %s", i, got.Key, first.Key)
		}
	}
	if got := routeOnce(session("")); got == first {
		t.Errorf("request without session went to %s, the busiest endpoint; want the fallback's least loaded", got.Key)
	}
}

// leastInFlight scores candidates by their negated in-flight count.
type leastInFlight struct{}

func (leastInFlight) Score(_ *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	for i, c := range cands {
		scores[i] = -float64(c.InFlight)
	}
	return nil
}

func TestScoreMarksTheSessionEndpoint(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 5)
	r := newRouter(newClock())
	rc := fleet.Context(session("s1"))
	want := otherThan(fleet, pick(t, r, rc))
	r.Learn(rc, want)

	cands := routingtest.Candidates(rc)
	scores := make([]float64, len(cands))
	for i := range scores {
		scores[i] = 7 // Score must overwrite every entry
	}
	if err := r.Score(rc, cands, scores); err != nil {
		t.Fatal(err)
	}
	for i, c := range cands {
		wantScore := 0.0
		if c.Pod == want {
			wantScore = 1
		}
		if scores[i] != wantScore {
			t.Errorf("score of %s = %v, want %v", c.Key, scores[i], wantScore)
		}
	}
}

// TestLearnRecordsTheActualChoice: when the router placed a session elsewhere than Pick
// said (it retried), the session sticks to where it was served.
func TestLearnRecordsTheActualChoice(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 5)
	r := newRouter(newClock())
	rc := fleet.Context(session("s1"))
	served := otherThan(fleet, pick(t, r, rc))
	r.Learn(rc, served)
	for range 10 {
		if got := pick(t, r, fleet.Context(session("s1"))); got != served {
			t.Fatalf("Pick = %s, want %s where the session was served", got.Key, served.Key)
		}
	}
}

// TestSessionMovesWhenItsEndpointLeaves: a session whose endpoint is no longer a
// candidate moves, and then sticks to its new endpoint even when the old one returns.
func TestSessionMovesWhenItsEndpointLeaves(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 10)
	all := fleet.Pods()
	r := newRouter(newClock())
	for s := range 20 {
		id := fmt.Sprintf("s%d", s)
		old := route(t, r, contextOver(fleet, session(id), all))
		moved := route(t, r, contextOver(fleet, session(id), without(all, slices.Index(all, old))))
		if moved == old {
			t.Fatalf("session %s stayed on %s, which is not a candidate", id, old.Key)
		}
		for range 5 {
			if got := route(t, r, contextOver(fleet, session(id), all)); got != moved {
				t.Fatalf("session %s went to %s after moving to %s", id, got.Key, moved.Key)
			}
		}
	}
}

// TestSessionsExpire: a session keeps its endpoint for TTL after its last request (and
// a hundredth of TTL more at the most), then is placed afresh by rendezvous hashing.
func TestSessionsExpire(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 5)
	c := newClock()
	r := newRouter(c)
	fresh := pick(t, r, fleet.Context(session("s1"))) // the rendezvous choice
	served := otherThan(fleet, fresh)
	r.Learn(fleet.Context(session("s1")), served)

	steps := []struct {
		advance time.Duration
		learn   bool
		want    *cache.Pod
	}{
		{advance: ttl / 2, learn: true, want: served}, // refreshes the TTL
		{advance: ttl, want: served},                  // exactly TTL after the last use
		{advance: ttl / 100, want: served},            // and the slack of its writes
		{advance: time.Nanosecond, want: fresh},       // expired
	}
	for i, step := range steps {
		c.Advance(step.advance)
		rc := fleet.Context(session("s1"))
		if got := pick(t, r, rc); got != step.want {
			t.Fatalf("step %d: Pick = %s, want %s", i, got.Key, step.want.Key)
		}
		if step.learn {
			r.Learn(rc, step.want)
		}
	}
}

// TestSessionsArePerModel: a session id remembered for one model does not steer
// requests for another.
func TestSessionsArePerModel(t *testing.T) {
	llama, mistral := routingtest.NewFleet("llama", 5), routingtest.NewFleet("mistral", 5)
	r := newRouter(newClock())
	fresh := pick(t, r, mistral.Context(session("s1")))
	rc := llama.Context(session("s1"))
	r.Learn(rc, llama.Pod(slices.Index(mistral.Pods(), otherThan(mistral, fresh))))
	if got := pick(t, r, mistral.Context(session("s1"))); got != fresh {
		t.Errorf("mistral Pick = %s, want its rendezvous choice %s", got.Key, fresh.Key)
	}
}

// choices returns the endpoint a fresh Router picks for each of n sessions over pods.
func choices(t *testing.T, fleet *routingtest.Fleet, pods []*cache.Pod, n int) []*cache.Pod {
	r := newRouter(newClock())
	got := make([]*cache.Pod, n)
	for s := range n {
		got[s] = pick(t, r, contextOver(fleet, session(fmt.Sprintf("session-%d", s)), pods))
	}
	return got
}

func TestRendezvousSpreadsSessions(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 10)
	perPod := make(map[*cache.Pod]int)
	for _, p := range choices(t, fleet, fleet.Pods(), 1000) {
		perPod[p]++
	}
	for _, p := range fleet.Pods() {
		if n := perPod[p]; n < 50 || n > 150 {
			t.Errorf("%s got %d of 1000 sessions, want about 100", p.Key, n)
		}
	}
}

func TestRendezvousAddingAnEndpointMovesFewSessions(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 11)
	all := fleet.Pods()
	before, after := choices(t, fleet, all[:10], 1000), choices(t, fleet, all, 1000)
	moved := 0
	for s := range before {
		if before[s] == after[s] {
			continue
		}
		moved++
		if after[s] != all[10] {
			t.Errorf("session %d moved from %s to %s, not to the new endpoint", s, before[s].Key, after[s].Key)
		}
	}
	if moved == 0 || moved >= 200 {
		t.Errorf("adding an 11th endpoint moved %d of 1000 sessions, want about 1000/11", moved)
	}
}

func TestRendezvousRemovingAnEndpointMovesOnlyItsSessions(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 10)
	all := fleet.Pods()
	removed := all[3]
	before, after := choices(t, fleet, all, 1000), choices(t, fleet, without(all, 3), 1000)
	for s := range before {
		switch {
		case before[s] == removed && after[s] == removed:
			t.Errorf("session %d stayed on the removed endpoint", s)
		case before[s] != removed && after[s] != before[s]:
			t.Errorf("session %d moved from %s to %s though its endpoint stayed", s, before[s].Key, after[s].Key)
		}
	}
}

// TestReplicasAgree: independent Routers, offered the candidates in any order, place a
// new session on the same endpoint.
func TestReplicasAgree(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 10)
	reversed := slices.Clone(fleet.Pods())
	slices.Reverse(reversed)
	a, b := choices(t, fleet, fleet.Pods(), 200), choices(t, fleet, reversed, 200)
	for s := range a {
		if a[s] != b[s] {
			t.Errorf("session %d: replica a picked %s, replica b %s", s, a[s].Key, b[s].Key)
		}
	}
}

// TestPicksOnlyCandidates offers random subsets of a fleet, with sessions learned on
// endpoints that may be outside the subset.
func TestPicksOnlyCandidates(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 20)
	rnd := routingtest.SeededRandom(7)
	r := newRouter(newClock())
	for i := range 500 {
		var pods []*cache.Pod
		for _, p := range fleet.Pods() {
			if rnd(3) == 0 {
				pods = append(pods, p)
			}
		}
		if len(pods) == 0 {
			continue
		}
		rc := contextOver(fleet, session(fmt.Sprintf("s%d", rnd(30))), pods)
		got := route(t, r, rc)
		if !slices.Contains(pods, got) {
			t.Fatalf("iteration %d: picked %s, not a candidate", i, got.Key)
		}
	}
}

// TestConcurrentUse picks, scores and learns from many goroutines while the clock
// moves; run with -race. Afterwards every session is sticky.
func TestConcurrentUse(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 16)
	c := newClock()
	r := newRouter(c)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				rc := fleet.Context(session(fmt.Sprintf("s%d", (g*31+i)%64)))
				cands := routingtest.Candidates(rc)
				if err := r.Score(rc, cands, make([]float64, len(cands))); err != nil {
					t.Errorf("Score: %v", err)
					return
				}
				j, err := r.Pick(rc, cands)
				if err != nil || j < 0 || j >= len(cands) {
					t.Errorf("Pick = %d, %v; want an index in [0, %d)", j, err, len(cands))
					return
				}
				r.Learn(rc, cands[j].Pod)
				c.Advance(time.Millisecond)
			}
		})
	}
	wg.Wait()
	for s := range 64 {
		id := fmt.Sprintf("s%d", s)
		if a, b := pick(t, r, fleet.Context(session(id))), pick(t, r, fleet.Context(session(id))); a != b {
			t.Errorf("session %s picked %s, then %s", id, a.Key, b.Key)
		}
	}
}

// TestPickPodAgreesWithPick checks that choosing straight from the pods picks what Pick
// picks among the Candidates of the pods the limit admits, for known and new sessions.
func TestPickPodAgreesWithPick(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 12)
	for i := range 12 {
		fleet.Reserve(i, i%3)
	}
	r := newRouter(newClock())
	for i := range 200 {
		rc := fleet.Context(session(fmt.Sprintf("s%d", i%40)))
		for _, limit := range []int64{0, 2, 1} {
			e := routing.Eligibility{Limit: limit}
			var admitted []routing.Candidate
			for _, c := range routingtest.Candidates(rc) {
				if e.Admits(c.InFlight) {
					admitted = append(admitted, c)
				}
			}
			want, err := r.Pick(rc, admitted)
			if err != nil {
				t.Fatal(err)
			}
			got, n, ok := r.PickPod(rc, e)
			if !ok || rc.Candidates[got] != admitted[want].Pod || n != admitted[want].InFlight {
				t.Fatalf("session %d, limit %d: PickPod = %d (%d in flight, %t), Pick chose %s", i%40, limit, got, n, ok, admitted[want].Key)
			}
		}
		r.Learn(rc, rc.Candidates[i%12]) // some sessions become known, on any pod
	}
	if _, _, ok := r.PickPod(fleet.Context(routing.Request{}), routing.Eligibility{}); ok {
		t.Error("PickPod without a session id did not decline")
	}
}

// TestSessionSticksToARank: a session served by one rank of a pod (an InferencePool
// targetPort, an endpoint of its own) sticks to that rank, not to the pod's own endpoint
// or its other ranks.
func TestSessionSticksToARank(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	dp := fleet.Pod(0).Endpoint
	dp.Labels = map[string]string{"app": "dp"}
	fleet.Cache.UpsertPod(dp)
	fleet.Cache.SetPool(types.NamespacedName{Namespace: "ns", Name: "dp"}, dp.Labels, []int32{8000, 8001, 8002})
	rank, ok := fleet.Cache.Pod(endpoint.Key{Namespace: "ns", Name: dp.Key.Name, Port: 8002})
	if !ok {
		t.Fatal("the pool made no rank on port 8002")
	}
	r := newRouter(newClock())
	rc := fleet.Context(session("s1"))
	r.Learn(rc, rank)
	for range 10 {
		if got := pick(t, r, fleet.Context(session("s1"))); got != rank {
			t.Fatalf("Pick = %s, want the rank %s where the session was served", got.Key, rank.Key)
		}
	}
}
