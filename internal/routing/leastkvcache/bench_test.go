package leastkvcache_test

import (
	"testing"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/leastkvcache"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// BenchmarkScore measures one Score call over fleets of growing size, serially and from
// parallel goroutines sharing one Router.
func BenchmarkScore(b *testing.B) {
	routingtest.BenchmarkScorer(b, func(_ *testing.B, f *routingtest.Fleet) routing.Scorer {
		for i := range f.Pods() {
			f.SetMetrics(i, endpoint.Metrics{KVCacheUsage: float64(i%100) / 100})
		}
		return leastkvcache.New(routing.DefaultRandom)
	})
}
