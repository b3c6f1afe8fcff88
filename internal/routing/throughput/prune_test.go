package throughput

import (
	"slices"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// remembered returns the names of the endpoints r has a history of, sorted.
func remembered(r *Router) []string {
	var names []string
	r.history.Range(func(k, _ any) bool {
		names = append(names, k.(endpoint.Key).Name)
		return true
	})
	slices.Sort(names)
	return names
}

func TestHistoryForgetsEndpointsWithoutRecentSnapshots(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	r := New()
	scoreAt := func(now time.Time) {
		t.Helper()
		rc := fleet.Context(routing.Request{})
		rc.Now = now
		if err := r.Score(rc, routingtest.Candidates(rc), make([]float64, 3)); err != nil {
			t.Fatalf("Score: %v", err)
		}
	}

	start := time.Now()
	for i := range 3 {
		fleet.SetMetrics(i, endpoint.Metrics{ScrapedAt: start})
	}
	scoreAt(start)
	if got, want := remembered(r), []string{"p0000", "p0001", "p0002"}; !slices.Equal(got, want) {
		t.Fatalf("remembered %v, want %v", got, want)
	}

	// Only pod 1 keeps reporting; the others' metrics go stale and then past Retention.
	for step := time.Minute; step <= Retention+pruneEvery; step += time.Minute {
		fleet.SetMetrics(1, endpoint.Metrics{ScrapedAt: start.Add(step)})
		scoreAt(start.Add(step))
	}
	if got, want := remembered(r), []string{"p0001"}; !slices.Equal(got, want) {
		t.Errorf("remembered %v, want %v", got, want)
	}
}
