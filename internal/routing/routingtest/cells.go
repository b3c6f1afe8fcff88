package routingtest

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// RandomFleet returns a fleet of 1 to 12 pods drawn with rnd: most with metrics, some of
// them stale, with queues, KV caches, learnt speeds, slots and throughputs of their own,
// and requests in flight.
func RandomFleet(rnd *rand.Rand) *Fleet {
	pods := 1 + rnd.IntN(12)
	f := NewFleet("llama", pods)
	for i := range pods {
		m := endpoint.Metrics{Running: float64(rnd.IntN(8)), Waiting: float64(rnd.IntN(3)), LocalInFlight: int64(rnd.IntN(3)),
			KVCacheUsage: float64(rnd.IntN(5)) / 4}
		if rnd.IntN(2) == 0 {
			m.BlockSize, m.NumGPUBlocks = 16, 64*(1+rnd.IntN(3))
		}
		if rnd.IntN(3) > 0 {
			m.Profile = endpoint.Profile{Epoch: uint64(rnd.IntN(2)), Slots: float64(rnd.IntN(6)),
				PrefillPerToken: 1e-4 * float64(1+rnd.IntN(3)), Service: float64(1 + rnd.IntN(3)),
				DecodePerToken: 0.01 * float64(rnd.IntN(3)), PrefilledTokens: 1e6, Requests: 1e3}
		}
		if rnd.IntN(4) > 0 {
			m.Profile.Throughput, m.Profile.ThroughputKnown = float64(rnd.IntN(4))*37.5, true
		}
		switch rnd.IntN(5) {
		case 0: // never scraped
			f.Reserve(i, rnd.IntN(5))
			continue
		case 1:
			m.ScrapedAt = time.Now().Add(-2 * StaleAfter)
		}
		f.SetMetrics(i, m)
		f.Reserve(i, rnd.IntN(5))
	}
	return f
}

// Admitted returns the pods of rc with fewer than limit requests in flight (0: every
// pod), as ScoreCells takes them, and their Candidates, as Score takes them.
func Admitted(rc *routing.RoutingContext, limit int64) (routing.Admitted, []routing.Candidate) {
	pods := routing.Admitted{Oldest: rc.Now.Add(-StaleAfter).UnixNano()}
	var cands []routing.Candidate
	for i, c := range Candidates(rc) {
		if limit == 0 || c.InFlight < limit {
			pods.Index, pods.InFlight = append(pods.Index, i), append(pods.InFlight, c.InFlight)
			cands = append(cands, c)
		}
	}
	return pods, cands
}

// CheckScoreCellsIsScore checks, over 300 random fleets (RandomFleet), requests and
// limits, that s.ScoreCells scores the pods a limit admits exactly as s.Score scores
// their Candidates, errors included. prepare, if set, is called with each fleet before
// it is scored, as to teach s about it.
func CheckScoreCellsIsScore(t *testing.T, s routing.CellScorer, prepare func(*Fleet, *rand.Rand)) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(12, 21))
	prompts := []string{"aaaabbbbccccdddd", "aaaabbbbcccc", "aaaabbbbeeee", "ffffgggg", "aaaa", "x", ""}
	for iter := range 300 {
		fleet := RandomFleet(rnd)
		if prepare != nil {
			prepare(fleet, rnd)
		}
		rc := fleet.Context(routing.Request{Prompt: prompts[rnd.IntN(len(prompts))],
			PromptTokens: int64(rnd.IntN(3000)), MaxTokens: int64(rnd.IntN(300))})
		pods, cands := Admitted(rc, int64(rnd.IntN(6)))
		if len(cands) == 0 {
			continue
		}
		want, got := make([]float64, len(cands)), make([]float64, len(cands))
		wantErr, gotErr := s.Score(rc, cands, want), s.ScoreCells(rc, pods, got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("iteration %d: ScoreCells error %v, Score error %v", iter, gotErr, wantErr)
		}
		if wantErr != nil {
			continue
		}
		for j := range want {
			if got[j] != want[j] && !(math.IsNaN(got[j]) && math.IsNaN(want[j])) {
				t.Fatalf("iteration %d: ScoreCells = %v, Score = %v", iter, got, want)
			}
		}
	}
}
