package throughput_test

import (
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/throughput"
)

// BenchmarkScore measures one Score call over fleets of growing size, every pod's
// throughput known, serially and from parallel goroutines sharing one Router.
func BenchmarkScore(b *testing.B) {
	routingtest.BenchmarkScorer(b, func(_ *testing.B, f *routingtest.Fleet) routing.Scorer {
		for i := range f.Pods() {
			f.SetMetrics(i, rated(float64(i%50)*10, float64(i%7)))
		}
		return throughput.New(routingtest.SeededRandom(1))
	})
}
