package routingtest

import (
	"fmt"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
)

// benchmarkSizes are the fleet sizes BenchmarkScorer measures.
var benchmarkSizes = []int{10, 100, 1000, 10000}

// benchmarkRequest is the request BenchmarkScorer scores when given none.
var benchmarkRequest = routing.Request{PromptTokens: 1000, MaxTokens: 128}

// BenchmarkScorer measures one Score call over fleets of 10, 100, 1,000 and 10,000 pods,
// as sub-benchmarks "endpoints=<N>" (serial) and "endpoints=<N>/parallel" (goroutines
// sharing one scorer), reporting allocations.
//
// For each size, before any timing, setup readies the fleet f (metrics, in-flight
// counts) and returns the scorer to measure, primed with whatever state it needs. The
// timed iterations then score every pod for reqs in turn, each with its Model set to the
// fleet's, so that several requests can exercise per-request state such as sessions;
// with no reqs they score a request of 1,000 prompt and 128 completion tokens. A Score
// error fails the benchmark.
func BenchmarkScorer(b *testing.B, setup func(b *testing.B, f *Fleet) routing.Scorer, reqs ...routing.Request) {
	if len(reqs) == 0 {
		reqs = []routing.Request{benchmarkRequest}
	}
	for _, n := range benchmarkSizes {
		fleet := NewFleet("llama", n)
		s := setup(b, fleet)
		contexts := make([]*routing.RoutingContext, len(reqs))
		for i, req := range reqs {
			contexts[i] = fleet.Context(req)
		}
		cands := Candidates(contexts[0])
		name := fmt.Sprintf("endpoints=%d", n)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			scores := make([]float64, n)
			i := 0
			for b.Loop() {
				if err := s.Score(contexts[i], cands, scores); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(contexts) {
					i = 0
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				scores := make([]float64, n)
				i := 0
				for pb.Next() {
					if err := s.Score(contexts[i], cands, scores); err != nil {
						b.Error(err)
						return
					}
					if i++; i == len(contexts) {
						i = 0
					}
				}
			})
		})
	}
}
