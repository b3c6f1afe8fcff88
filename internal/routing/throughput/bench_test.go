package throughput_test

import (
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/throughput"
)

// BenchmarkScore measures one Score call over fleets of growing size, serially and from
// parallel goroutines sharing one Router.
func BenchmarkScore(b *testing.B) {
	routingtest.BenchmarkScorer(b, func(b *testing.B, f *routingtest.Fleet) routing.Scorer {
		// r records two snapshots of each pod before the timer starts, so that the
		// benchmark measures comparing throughputs, not recording them.
		r := throughput.New()
		scraped := time.Now()
		for i := range f.Pods() {
			f.SetMetrics(i, endpoint.Metrics{GenerationTokens: float64(i), ScrapedAt: scraped.Add(-10 * time.Second)})
		}
		record(b, r, f)
		for i := range f.Pods() {
			f.SetMetrics(i, endpoint.Metrics{GenerationTokens: float64(2 * i), Running: float64(i % 7), ScrapedAt: scraped})
		}
		record(b, r, f)
		return r
	})
}

// record has r score f's pods, so that it records their current metrics.
func record(b *testing.B, r routing.Scorer, f *routingtest.Fleet) {
	b.Helper()
	rc := f.Context(routing.Request{})
	cands := routingtest.Candidates(rc)
	if err := r.Score(rc, cands, make([]float64, len(cands))); err != nil {
		b.Fatal(err)
	}
}
