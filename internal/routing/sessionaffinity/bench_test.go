package sessionaffinity_test

import (
	"fmt"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/sessionaffinity"
)

// BenchmarkScore scores fleets of each size for sessions cycling through 1024 ids, half
// of them learned (a table lookup, then a candidate scan) and half new (rendezvous
// hashing over every candidate), serially and from parallel goroutines.
func BenchmarkScore(b *testing.B) {
	sessions := make([]routing.Request, 1024)
	for s := range sessions {
		sessions[s] = session(fmt.Sprintf("session-%d", s))
	}
	routingtest.BenchmarkScorer(b, func(_ *testing.B, f *routingtest.Fleet) routing.Scorer {
		r := sessionaffinity.New(sessionaffinity.Config{}, routingtest.SeededRandom(1))
		pods := f.Pods()
		for s := 0; s < len(sessions); s += 2 {
			r.Learn(f.Context(sessions[s]), pods[s%len(pods)])
		}
		return r
	}, sessions...)
}
