package leastlatency_test

import (
	"testing"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/leastlatency"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// BenchmarkScore measures one Score call over fleets of growing size, every pod
// observed, serially and from parallel goroutines sharing one Router.
func BenchmarkScore(b *testing.B) {
	routingtest.BenchmarkScorer(b, func(_ *testing.B, f *routingtest.Fleet) routing.Scorer {
		for i := range f.Pods() {
			f.SetMetrics(i, endpoint.Metrics{Running: float64(i % 7), Waiting: float64(i % 3), PromptTokens: 10000,
				TTFT: endpoint.Histogram{Count: 10, Sum: 1}, TPOT: endpoint.Histogram{Count: 100, Sum: 2},
				E2E: endpoint.Histogram{Count: 10, Sum: 30}})
		}
		return leastlatency.New(routingtest.SeededRandom(1))
	})
}
