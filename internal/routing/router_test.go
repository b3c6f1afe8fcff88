package routing_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// cacheTracker reserves on the cache's counters, as the gateway's view does.
var cacheTracker cache.Tracker

// fixedPicker always picks the candidate at one index.
type fixedPicker int

func (f fixedPicker) Pick(*routing.RoutingContext, []routing.Candidate) (int, error) {
	return int(f), nil
}

// undecided never decides.
type undecided struct{}

func (undecided) Pick(*routing.RoutingContext, []routing.Candidate) (int, error) {
	return 0, routing.ErrUndecided
}

// leastInFlight picks the first candidate with the fewest requests in flight.
type leastInFlight struct{}

func (leastInFlight) Pick(_ *routing.RoutingContext, cands []routing.Candidate) (int, error) {
	best := 0
	for i, c := range cands {
		if c.InFlight < cands[best].InFlight {
			best = i
		}
	}
	return best, nil
}

// learning records what it learns.
type learning struct {
	fixedPicker
	mu      sync.Mutex
	learned []string
}

func (l *learning) Learn(_ *routing.RoutingContext, chosen *cache.Pod) routing.Receipt {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.learned = append(l.learned, chosen.Key.Name)
	return nil
}

func TestRouterOutcomes(t *testing.T) {
	opts := routing.Options{Reserver: cacheTracker, StaleAfter: routingtest.StaleAfter}
	withFallback := opts
	withFallback.Fallback = fixedPicker(2)
	capped := opts
	capped.MaxInFlight = 1

	tests := []struct {
		name    string
		picker  routing.Picker
		opts    routing.Options
		noPods  bool
		busy    bool
		wantPod string
		wantErr error
	}{
		{name: "picked", picker: fixedPicker(1), opts: opts, wantPod: "p0001"},
		{name: "undecided goes to the fallback", picker: undecided{}, opts: withFallback, wantPod: "p0002"},
		{name: "undecided without fallback", picker: undecided{}, opts: opts, wantErr: routing.ErrUndecided},
		{name: "no candidates", picker: fixedPicker(0), opts: opts, noPods: true, wantErr: routing.ErrNoEndpoints},
		{name: "every candidate at the cap", picker: fixedPicker(0), opts: capped, busy: true, wantErr: routing.ErrQueueFull},
		{name: "algorithm out of range", picker: fixedPicker(7), opts: opts, wantErr: errors.New("any")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fleet := routingtest.NewFleet("llama", 3)
			rc := fleet.Context(routing.Request{})
			if tt.noPods {
				rc.Candidates = nil
			}
			if tt.busy {
				for i := range 3 {
					fleet.Reserve(i, 1)
				}
			}
			routing.NewRouter(tt.picker, tt.opts).Route(rc)
			target, err := rc.TryResult()
			switch {
			case tt.wantErr != nil:
				if err == nil || (tt.wantErr.Error() != "any" && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("error = %v, want %v", err, tt.wantErr)
				}
			case err != nil:
				t.Fatalf("error = %v", err)
			default:
				defer target.Release(0)
				if target.Pod.Key.Name != tt.wantPod {
					t.Errorf("routed to %s, want %s", target.Pod.Key.Name, tt.wantPod)
				}
				if n := target.Pod.Load().InFlight(); n != 1 {
					t.Errorf("in flight on the chosen pod = %d, want 1 (reserved in the same step)", n)
				}
			}
		})
	}
}

func TestRouterLearnsOnceAfterReserving(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	l := &learning{fixedPicker: 2}
	rc := fleet.Context(routing.Request{})
	routing.NewRouter(l, routing.Options{Reserver: cacheTracker, StaleAfter: routingtest.StaleAfter}).Route(rc)
	if _, err := rc.TryResult(); err != nil {
		t.Fatal(err)
	}
	if len(l.learned) != 1 || l.learned[0] != "p0002" {
		t.Errorf("learned %v, want [p0002]", l.learned)
	}
}

// TestSelectAndReserveBurst checks that choosing and reserving cannot be separated by
// other decisions: 1,000 concurrent least-loaded decisions over 10 idle endpoints leave
// each endpoint with 100 ± 1 requests in flight.
func TestSelectAndReserveBurst(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 10)
	router := routing.NewRouter(leastInFlight{}, routingtest.Options())
	routingtest.CheckBurstSpreadsEvenly(t, router, fleet)
}

func TestRankUnknownLast(t *testing.T) {
	known := &endpoint.Metrics{}
	cands := []routing.Candidate{{Metrics: known}, {}, {Metrics: known}}
	scores := []float64{-2, 99, 5}
	routing.RankUnknownLast(cands, scores)
	if want := []float64{-2, -3, 5}; !slices.Equal(scores, want) {
		t.Errorf("scores = %v, want %v", scores, want)
	}
	none := []float64{7, 8, 9}
	routing.RankUnknownLast(make([]routing.Candidate, 3), none)
	if want := []float64{7, 8, 9}; !slices.Equal(none, want) {
		t.Errorf("with no known candidate, scores = %v, want them untouched", none)
	}
}
