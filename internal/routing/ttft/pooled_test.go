package ttft_test

import (
	"math"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/ttft"
)

// pooledPrefill returns the pooled prefill rate that p gives cells at now: what an
// engine of unknown speed is predicted to take per uncached token.
func pooledPrefill(p *ttft.Pooled, cells []*cache.Hot, now time.Time) float64 {
	f := p.Fleet(cells, now, routingtest.StaleAfter)
	e := f.Estimator(now)
	return e.Unknown(1)
}

// TestPooledFollowsTheCells checks that a Pooled reuses a candidate set's pooled speed
// for PooledTTL and no longer: it follows a metrics write once PooledTTL has passed,
// and then leaves out a cell whose metrics turned stale.
func TestPooledFollowsTheCells(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 2)
	scraped := time.Now()
	fleet.SetMetrics(0, endpoint.Metrics{ScrapedAt: scraped, Profile: learnt(1e-4, 1, 8)})
	fleet.SetMetrics(1, endpoint.Metrics{ScrapedAt: scraped, Profile: learnt(3e-4, 1, 8)})
	cells := fleet.Context(routing.Request{}).Cells
	var p ttft.Pooled
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-12 }

	if got := pooledPrefill(&p, cells, scraped); !near(got, 2e-4) {
		t.Fatalf("pooled prefill = %g, want the mean 2e-4", got)
	}
	fleet.SetMetrics(1, endpoint.Metrics{ScrapedAt: scraped, Profile: learnt(5e-4, 1, 8)})
	if got := pooledPrefill(&p, cells, scraped.Add(ttft.PooledTTL/2)); !near(got, 2e-4) {
		t.Errorf("within PooledTTL of a write: pooled prefill = %g, want the pool kept, 2e-4", got)
	}
	if got := pooledPrefill(&p, cells, scraped.Add(ttft.PooledTTL)); !near(got, 3e-4) {
		t.Errorf("PooledTTL after a write: pooled prefill = %g, want the new mean 3e-4", got)
	}
	if got := pooledPrefill(&p, cells, scraped.Add(routingtest.StaleAfter+time.Millisecond)); !near(got, ttft.PriorPrefillPerToken) {
		t.Errorf("every cell stale: pooled prefill = %g, want the prior %g", got, ttft.PriorPrefillPerToken)
	}
}

// TestPooledKeepsSetsApart checks that the pools of two candidate sets, decided over in
// turn, are each their own.
func TestPooledKeepsSetsApart(t *testing.T) {
	now := time.Now()
	var p ttft.Pooled
	var sets [][]*cache.Hot
	for i := range 3 {
		fleet := routingtest.NewFleet("llama", 1)
		fleet.SetMetrics(0, endpoint.Metrics{ScrapedAt: now, Profile: learnt(float64(i+1)*1e-4, 1, 8)})
		sets = append(sets, fleet.Context(routing.Request{}).Cells)
	}
	for range 2 {
		for i, cells := range sets {
			if got, want := pooledPrefill(&p, cells, now), float64(i+1)*1e-4; !(math.Abs(got-want) <= 1e-12) {
				t.Errorf("set %d: pooled prefill = %g, want %g", i, got, want)
			}
		}
	}
}
