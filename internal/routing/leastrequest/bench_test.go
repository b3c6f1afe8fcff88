package leastrequest_test

import (
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/leastrequest"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// BenchmarkScore measures one Score call over fleets of growing size, with 0 to 4
// requests in flight per pod, serially and from parallel goroutines sharing one Router.
func BenchmarkScore(b *testing.B) {
	routingtest.BenchmarkScorer(b, func(_ *testing.B, f *routingtest.Fleet) routing.Scorer {
		for i := range f.Pods() {
			f.Reserve(i, i%5)
		}
		return leastrequest.New(routing.DefaultRandom)
	})
}
