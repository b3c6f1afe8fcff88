package weighted_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/leastkvcache"
	"github.com/switchboard-llm/switchboard/internal/routing/leastlatency"
	"github.com/switchboard-llm/switchboard/internal/routing/leastrequest"
	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/throughput"
	"github.com/switchboard-llm/switchboard/internal/routing/weighted"
)

// fixed scores candidate i with its i-th value.
type fixed []float64

func (f fixed) Score(_ *routing.RoutingContext, _ []routing.Candidate, scores []float64) error {
	copy(scores, f)
	return nil
}

// failing fails with its error.
type failing struct{ err error }

func (f failing) Score(*routing.RoutingContext, []routing.Candidate, []float64) error { return f.err }

// undecided never decides.
var undecided = failing{err: routing.ErrUndecided}

// fewestInFlight scores candidates by their negated in-flight count.
type fewestInFlight struct{}

func (fewestInFlight) Score(_ *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	for i, c := range cands {
		scores[i] = -float64(c.InFlight)
	}
	return nil
}

// learning is a fixed scorer that records the endpoints it learns; with receipts set,
// it returns a receipt that counts its settlements in settled.
type learning struct {
	fixed
	receipts bool
	mu       sync.Mutex
	learned  []string
	settled  int
}

func (l *learning) Learn(_ *routing.RoutingContext, chosen *cache.Pod) routing.Receipt {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.learned = append(l.learned, chosen.Key.Name)
	if !l.receipts {
		return nil
	}
	return (*learningReceipt)(l)
}

// learningReceipt is a learning term's receipt.
type learningReceipt learning

func (r *learningReceipt) Settle(routing.Usage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled++
}

// mustNew returns a Router over terms with seeded randomness.
func mustNew(t testing.TB, terms ...weighted.Term) *weighted.Router {
	t.Helper()
	r, err := weighted.New(terms, routingtest.SeededRandom(1))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// contextOf returns a routing context over a fleet of n pods and its candidates.
func contextOf(n int) (*routing.RoutingContext, []routing.Candidate) {
	rc := routingtest.NewFleet("llama", n).Context(routing.Request{})
	return rc, routingtest.Candidates(rc)
}

func TestNewRejectsInvalidTerms(t *testing.T) {
	one := fixed{1}
	tests := []struct {
		name  string
		terms []weighted.Term
		want  string
	}{
		{name: "no terms", terms: nil, want: "at least one term"},
		{name: "no scorer", terms: []weighted.Term{{Name: "a", Weight: 1}}, want: `term "a" has no scorer`},
		{name: "negative weight", terms: []weighted.Term{{Name: "a", Scorer: one, Weight: 1}, {Name: "b", Scorer: one, Weight: -1}},
			want: `term "b" has weight -1`},
		{name: "NaN weight", terms: []weighted.Term{{Name: "a", Scorer: one, Weight: math.NaN()}}, want: `term "a" has weight NaN`},
		{name: "infinite weight", terms: []weighted.Term{{Name: "a", Scorer: one, Weight: math.Inf(1)}}, want: `term "a" has weight +Inf`},
		{name: "all weights zero", terms: []weighted.Term{{Name: "a", Scorer: one}, {Name: "b", Scorer: one}}, want: "positive weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := weighted.New(tt.terms, routingtest.SeededRandom(1))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := weighted.New([]weighted.Term{{Name: "a", Scorer: one, Weight: 1}}, nil); err == nil {
		t.Error("New with a nil Random succeeded")
	}
}

func TestScoreNormalisesAndWeighs(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name  string
		terms []weighted.Term
		want  []float64
	}{
		{name: "shortfall relative to magnitude", terms: []weighted.Term{{Scorer: fixed{10, 20, 30}, Weight: 1}},
			want: []float64{1.0 / 3, 2.0 / 3, 1}},
		{name: "scale does not matter", terms: []weighted.Term{{Scorer: fixed{1000, 2000, 3000}, Weight: 1}},
			want: []float64{1.0 / 3, 2.0 / 3, 1}},
		{name: "a small difference stays small", terms: []weighted.Term{{Scorer: fixed{0.50, 0.51}, Weight: 1}},
			want: []float64{1 - 0.01/0.51, 1}},
		{name: "none against all is the whole weight", terms: []weighted.Term{{Scorer: fixed{0, 1}, Weight: 2}},
			want: []float64{0, 2}},
		{name: "weight scales", terms: []weighted.Term{{Scorer: fixed{10, 20, 30}, Weight: 3}},
			want: []float64{1, 2, 3}},
		{name: "negative scores", terms: []weighted.Term{{Scorer: fixed{-30, -10, -20}, Weight: 1}},
			want: []float64{1.0 / 3, 1, 2.0 / 3}},
		{name: "scores of both signs span at most the weight", terms: []weighted.Term{{Scorer: fixed{-1, 1}, Weight: 1}},
			want: []float64{0, 1}},
		{name: "equal scores are all 1", terms: []weighted.Term{{Scorer: fixed{5, 5, 5}, Weight: 2}},
			want: []float64{2, 2, 2}},
		{name: "terms sum by weight", terms: []weighted.Term{
			{Scorer: fixed{0, 1, 2}, Weight: 1},
			{Scorer: fixed{2, 1, 0}, Weight: 2},
		}, want: []float64{2, 1.5, 1}},
		{name: "undecided term is skipped", terms: []weighted.Term{
			{Name: "u", Scorer: undecided, Weight: 5},
			{Scorer: fixed{1, 2, 3}, Weight: 1},
		}, want: []float64{1.0 / 3, 2.0 / 3, 1}},
		{name: "zero-weight term is not asked", terms: []weighted.Term{
			{Name: "broken", Scorer: failing{err: errors.New("boom")}},
			{Scorer: fixed{1, 2, 3}, Weight: 1},
		}, want: []float64{1.0 / 3, 2.0 / 3, 1}},
		{name: "non-finite scores", terms: []weighted.Term{{Scorer: fixed{-inf, 0, 10, inf, math.NaN()}, Weight: 1}},
			want: []float64{0, 0, 1, 1, 0}},
		{name: "zero scores are all the weight", terms: []weighted.Term{{Scorer: fixed{0, 0, inf}, Weight: 2}},
			want: []float64{2, 2, 2}},
		{name: "no finite score", terms: []weighted.Term{{Scorer: fixed{inf, -inf, math.NaN()}, Weight: 2}},
			want: []float64{2, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.terms...)
			rc, cands := contextOf(len(tt.want))
			got := make([]float64, len(cands))
			if err := r.Score(rc, cands, got); err != nil {
				t.Fatalf("Score: %v", err)
			}
			for i := range got {
				if !(math.Abs(got[i]-tt.want[i]) <= 1e-12) { // a NaN total fails too
					t.Fatalf("Score = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestPickFollowsTheWeights(t *testing.T) {
	prefersFirst, prefersSecond := fixed{1, 0, 0.5}, fixed{0, 1, 0.5}
	tests := []struct {
		name          string
		first, second float64
		want          int
	}{
		{name: "first term heavier", first: 2, second: 1, want: 0},
		{name: "second term heavier", first: 1, second: 2, want: 1},
		{name: "only the second term", first: 0, second: 1, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t,
				weighted.Term{Name: "first", Scorer: prefersFirst, Weight: tt.first},
				weighted.Term{Name: "second", Scorer: prefersSecond, Weight: tt.second})
			rc, cands := contextOf(3)
			if got, err := r.Pick(rc, cands); err != nil || got != tt.want {
				t.Errorf("Pick = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestUndecidedWhenEveryTermIs(t *testing.T) {
	r := mustNew(t, weighted.Term{Name: "a", Scorer: undecided, Weight: 1}, weighted.Term{Name: "b", Scorer: undecided, Weight: 2})
	rc, cands := contextOf(3)
	if _, err := r.Pick(rc, cands); !errors.Is(err, routing.ErrUndecided) {
		t.Errorf("Pick error = %v, want ErrUndecided", err)
	}
	if err := r.Score(rc, cands, make([]float64, len(cands))); !errors.Is(err, routing.ErrUndecided) {
		t.Errorf("Score error = %v, want ErrUndecided", err)
	}
}

func TestTermFailureFailsTheDecision(t *testing.T) {
	boom := errors.New("boom")
	r := mustNew(t, weighted.Term{Name: "ok", Scorer: fixed{1, 2}, Weight: 1}, weighted.Term{Name: "broken", Scorer: failing{err: boom}, Weight: 1})
	rc, cands := contextOf(2)
	_, err := r.Pick(rc, cands)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "broken") {
		t.Errorf("Pick error = %v, want boom naming the term", err)
	}
}

// TestTiesAreBrokenAtRandom: equal totals are chosen among at random, every one of them
// eventually, reproducibly for a seed.
func TestTiesAreBrokenAtRandom(t *testing.T) {
	picks := func(seed uint64) []int {
		r, err := weighted.New([]weighted.Term{
			{Name: "a", Scorer: fixed{1, 3, 3, 0, 3}, Weight: 1},
			{Name: "b", Scorer: fixed{7, 7, 7, 7, 7}, Weight: 1},
		}, routingtest.SeededRandom(seed))
		if err != nil {
			t.Fatal(err)
		}
		rc, cands := contextOf(5)
		got := make([]int, 300)
		for i := range got {
			if got[i], err = r.Pick(rc, cands); err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	got := picks(1)
	counts := make([]int, 5)
	for _, i := range got {
		counts[i]++
	}
	for i, n := range counts {
		tied := i == 1 || i == 2 || i == 4
		if tied && n < 50 || !tied && n != 0 {
			t.Errorf("candidate %d picked %d of 300 times (counts %v), want about 100 for each of 1, 2, 4 only", i, n, counts)
		}
	}
	if again := picks(1); !slices.Equal(got, again) {
		t.Error("the same seed picked differently")
	}
}

func TestLearnReachesLearningTerms(t *testing.T) {
	l := &learning{fixed: fixed{1, 0}}
	r := mustNew(t, weighted.Term{Name: "plain", Scorer: fixed{0, 1}, Weight: 1}, weighted.Term{Name: "learning", Scorer: l, Weight: 1})
	rc, cands := contextOf(2)
	r.Learn(rc, cands[1].Pod)
	if want := []string{cands[1].Key.Name}; !slices.Equal(l.learned, want) {
		t.Errorf("learned %v, want %v", l.learned, want)
	}
}

// TestLearnReturnsEveryTermsReceipt: the receipt Learn returns settles each receipt the
// terms returned once, whether none, one or several terms return one.
func TestLearnReturnsEveryTermsReceipt(t *testing.T) {
	for receipts := range 4 {
		terms := []weighted.Term{{Name: "plain", Scorer: fixed{0, 1}, Weight: 1}}
		var learners []*learning
		for i := range 3 {
			l := &learning{fixed: fixed{1, 0}, receipts: i < receipts}
			learners = append(learners, l)
			terms = append(terms, weighted.Term{Name: fmt.Sprintf("learning%d", i), Scorer: l, Weight: 1})
		}
		r := mustNew(t, terms...)
		rc, cands := contextOf(2)
		rec := r.Learn(rc, cands[1].Pod)
		if (rec == nil) != (receipts == 0) {
			t.Fatalf("%d terms returned receipts; Learn returned %v", receipts, rec)
		}
		if rec != nil {
			rec.Settle(routing.Usage{PromptTokens: 1})
		}
		for i, l := range learners {
			want := 0
			if i < receipts {
				want = 1
			}
			if l.settled != want {
				t.Errorf("%d terms returned receipts: term %d settled %d times, want %d", receipts, i, l.settled, want)
			}
		}
	}
}

// TestPicksOnlyCandidates picks over random scores for fleets of many sizes.
func TestPicksOnlyCandidates(t *testing.T) {
	rnd := routingtest.SeededRandom(3)
	for n := 1; n <= 40; n++ {
		a, b := make(fixed, n), make(fixed, n)
		for i := range n {
			a[i], b[i] = float64(rnd(5)-2), float64(rnd(1000))
		}
		r := mustNew(t, weighted.Term{Name: "a", Scorer: a, Weight: 1}, weighted.Term{Name: "b", Scorer: b, Weight: 0.5})
		rc, cands := contextOf(n)
		if i, err := r.Pick(rc, cands); err != nil || i < 0 || i >= n {
			t.Fatalf("n=%d: Pick = %d, %v; want an index in [0, %d)", n, i, err, n)
		}
	}
}

// TestRouterRoutesByTheTotal routes through routing.NewRouter: the weighted decision
// places requests while a term decides, the fallback when none does.
func TestRouterRoutesByTheTotal(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 4)
	fleet.Reserve(0, 3)
	fleet.Reserve(1, 1)
	fleet.Reserve(3, 2)
	opts := routingtest.Options()
	opts.Fallback = firstCandidate{}
	tests := []struct {
		name  string
		terms []weighted.Term
		want  *cache.Pod
	}{
		{name: "fewest in flight outweighs a preference", terms: []weighted.Term{
			{Name: "load", Scorer: fewestInFlight{}, Weight: 2},
			{Name: "preference", Scorer: fixed{0, 0, 0, 1}, Weight: 1},
		}, want: fleet.Pod(2)},
		{name: "undecided goes to the fallback", terms: []weighted.Term{{Name: "u", Scorer: undecided, Weight: 1}},
			want: fleet.Pod(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := fleet.Context(routing.Request{})
			target := routingtest.Route(t, routing.NewRouter(mustNew(t, tt.terms...), opts), rc)
			defer target.Release(0)
			if target.Pod != tt.want {
				t.Errorf("routed to %s, want %s", target.Pod.Key, tt.want.Key)
			}
		})
	}
}

// firstCandidate picks the first candidate.
type firstCandidate struct{}

func (firstCandidate) Pick(*routing.RoutingContext, []routing.Candidate) (int, error) { return 0, nil }

// TestPickPodIsPick checks PickPod against Pick over random fleets, limits and weights,
// when every term scores from the hot cells, and that it declines when one does not.
func TestPickPodIsPick(t *testing.T) {
	first := routingtest.FirstTie
	routingtest.CheckPickPodIsPick(t, func(fleet *routingtest.Fleet, rnd *rand.Rand) routing.PodPicker {
		pc := prefixcache.New(prefixcache.Config{BlockSize: 1, LoadImbalanceThreshold: 3}, first)
		for range rnd.IntN(8) {
			p := routingtest.Prompts[rnd.IntN(len(routingtest.Prompts))]
			pc.Learn(fleet.Context(routing.Request{Prompt: p}), fleet.Pod(rnd.IntN(len(fleet.Pods()))))
		}
		r, err := weighted.New([]weighted.Term{
			{Name: "least-kv-cache", Scorer: leastkvcache.New(first), Weight: 2},
			{Name: "prefix-cache", Scorer: pc, Weight: 1},
			{Name: "least-request", Scorer: leastrequest.New(first), Weight: float64(rnd.IntN(2))},
			{Name: "least-latency", Scorer: leastlatency.New(first), Weight: float64(rnd.IntN(2))},
			{Name: "throughput", Scorer: throughput.New(first), Weight: float64(rnd.IntN(2))},
		}, first)
		if err != nil {
			t.Fatal(err)
		}
		return r
	})

	r := mustNew(t, weighted.Term{Name: "least-request", Scorer: leastrequest.New(first), Weight: 1},
		weighted.Term{Name: "fixed", Scorer: fixed{1, 2, 3}, Weight: 1})
	rc, _ := contextOf(3)
	if i, _, ok := r.PickPod(rc, routing.Eligibility{StaleAfter: routingtest.StaleAfter}); ok {
		t.Errorf("PickPod = %d with a term that scores only Candidates, want a decline", i)
	}
}
