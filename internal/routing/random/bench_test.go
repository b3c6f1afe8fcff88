package random_test

import (
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/random"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// BenchmarkScore measures one Score call over fleets of growing size, serially and from
// parallel goroutines sharing one Router.
func BenchmarkScore(b *testing.B) {
	routingtest.BenchmarkScorer(b, func(*testing.B, *routingtest.Fleet) routing.Scorer {
		return random.New(routing.DefaultRandom)
	})
}
