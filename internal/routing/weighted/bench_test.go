package weighted_test

import (
	"testing"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/weighted"
)

// freeKVCache scores candidates by their free KV cache; undecided without metrics.
type freeKVCache struct{}

func (freeKVCache) Score(_ *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
	known := false
	for i, c := range cands {
		scores[i] = 0
		if c.Metrics != nil {
			scores[i], known = 1-c.Metrics.KVCacheUsage, true
		}
	}
	if !known {
		return routing.ErrUndecided
	}
	return nil
}

// BenchmarkScore scores fleets of each size with two terms, one reading load and one
// reading metrics, serially and from parallel goroutines.
func BenchmarkScore(b *testing.B) {
	routingtest.BenchmarkScorer(b, func(b *testing.B, f *routingtest.Fleet) routing.Scorer {
		for i := range f.Pods() {
			f.SetMetrics(i, endpoint.Metrics{KVCacheUsage: float64(i%100) / 100})
			f.Reserve(i, i%7)
		}
		return mustNew(b, weighted.Term{Name: "load", Scorer: fewestInFlight{}, Weight: 1},
			weighted.Term{Name: "kv", Scorer: freeKVCache{}, Weight: 2})
	}, routing.Request{})
}
