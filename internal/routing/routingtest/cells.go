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
// their Candidates, errors included, and that a third of the fleets at least were
// scored, not failed. prepare, if set, is called with each fleet before it is scored,
// as to teach s about it.
func CheckScoreCellsIsScore(t *testing.T, s routing.CellScorer, prepare func(*Fleet, *rand.Rand)) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(12, 21))
	scored := 0
	defer func() { checkCompared(t, "scored", scored) }()
	for iter := range 300 {
		fleet := RandomFleet(rnd)
		if prepare != nil {
			prepare(fleet, rnd)
		}
		rc := fleet.Context(randomRequest(rnd))
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
		scored++
		for j := range want {
			if got[j] != want[j] && !(math.IsNaN(got[j]) && math.IsNaN(want[j])) {
				t.Fatalf("iteration %d: ScoreCells = %v, Score = %v", iter, got, want)
			}
		}
	}
}

// FirstTie is a routing.Random that always draws 0: every draw, of ArgMax, Ties or
// reservoir sampling, then takes the same tie, so that two ways of choosing that agree
// choose the same candidate.
func FirstTie(int) int { return 0 }

// CheckPickPodIsPick checks, over 300 random fleets (RandomFleet), requests and limits,
// that PickPod chooses among the pods a limit admits exactly as Pick chooses among their
// Candidates: the same pod, with its count; that it declines where no pod is admitted or
// Pick fails; and that a third of the fleets at least were chosen from, not declined.
// newPicker returns the picker for each fleet, drawing with FirstTie, and may teach it
// about the fleet with rnd.
func CheckPickPodIsPick(t *testing.T, newPicker func(*Fleet, *rand.Rand) routing.PodPicker) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(3, 9))
	chosen := 0
	defer func() { checkCompared(t, "chosen from", chosen) }()
	for iter := range 300 {
		fleet := RandomFleet(rnd)
		p := newPicker(fleet, rnd)
		rc := fleet.Context(randomRequest(rnd))
		limit := int64(rnd.IntN(6)) // 0: no limit
		pods, cands := Admitted(rc, limit)
		got, n, ok := p.PickPod(rc, routing.Eligibility{Limit: limit, StaleAfter: StaleAfter})
		if len(cands) == 0 {
			if ok {
				t.Fatalf("iteration %d: PickPod = %d with no pod admitted, want a decline", iter, got)
			}
			continue
		}
		want, err := p.Pick(rc, cands)
		if err != nil {
			if ok {
				t.Fatalf("iteration %d: PickPod = %d, %d; Pick: %v, want a decline", iter, got, n, err)
			}
			continue
		}
		if !ok || got != pods.Index[want] || n != pods.InFlight[want] {
			t.Fatalf("iteration %d: PickPod = %d, %d, %t; Pick chose %d (%d in flight)",
				iter, got, n, ok, pods.Index[want], pods.InFlight[want])
		}
		chosen++
	}
}

// checkCompared fails t when fewer than a third of a check's 300 fleets were compared
// (what names how): a check whose fleets all fail or decline compares nothing.
func checkCompared(t *testing.T, what string, n int) {
	t.Helper()
	if n < 100 {
		t.Errorf("only %d of 300 random fleets were %s: the check compared too little", n, what)
	}
}

// Prompts are the prompts of the random requests of CheckScoreCellsIsScore and
// CheckPickPodIsPick, sharing leading blocks of one, two or four bytes.
var Prompts = []string{"aaaabbbbccccdddd", "aaaabbbbcccc", "aaaabbbbeeee", "ffffgggg", "aaaa", "x", ""}

// randomRequest returns a request with one of Prompts and random lengths.
func randomRequest(rnd *rand.Rand) routing.Request {
	return routing.Request{Prompt: Prompts[rnd.IntN(len(Prompts))], PromptTokens: int64(rnd.IntN(3000)), MaxTokens: int64(rnd.IntN(300))}
}
