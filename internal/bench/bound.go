package bench

import (
	"iter"
	"time"

	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

// boundStrategy names the lower bound where the report shows it beside the strategies;
// its prompts are drawn with this name in their salt, as a strategy's are with its own.
const boundStrategy = "lower bound"

// Bound is the least TTFT any routing could give the requests of one load point, by the
// engines' own latency model; it is computed from the point's requests, not measured.
type Bound struct {
	Workload string  `json:"workload"`
	Rate     float64 `json:"rate_rps"`
	Seed     uint64  `json:"seed"`
	TTFT     Summary `json:"ttft_ms"`
}

// lowerBound returns, for each of reqs in arrival order, the time to first token it would
// have on an engine configured as engine that held every block of every earlier request's
// prompt and ran it alone at once: its prefill of the tokens past the longest block-aligned
// prefix it shares with an earlier prompt, scaled by the engine's time scale. No routing
// over engines of that model does better: a block is cached on an engine only once some
// request brought it there, batching only slows a prefill, and queueing only adds.
func lowerBound(reqs []Request, engine enginesim.Config) []time.Duration {
	held := map[uint64]bool{}
	out := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		turns := make([]enginesim.Message, len(r.Messages))
		for j, m := range r.Messages {
			turns[j] = enginesim.Message{Role: m.Role, Text: m.Content}
		}
		prompt := enginesim.ChatPrompt(turns)
		hashes := enginesim.BlockHashes(prompt, engine.BlockSize)
		cached := 0
		for cached < len(hashes) && held[hashes[cached]] {
			cached++
		}
		for _, h := range hashes {
			held[h] = true
		}
		uncached := enginesim.CountTokens(prompt) - cached*engine.BlockSize
		out[i] = engine.Scaled(engine.PrefillTime(uncached, 1))
	}
	return out
}

// boundAggregate returns the lower bounds of workload's points at rate over their seeds
// as an Aggregate of which only the TTFT mean and p99 are set; false when there are none.
func boundAggregate(bounds []Bound, workload string, rate float64) (Aggregate, bool) {
	a := Aggregate{Workload: workload, Strategy: boundStrategy, Rate: rate}
	var means, p99s []float64
	for b := range boundsAt(bounds, workload, rate) {
		a.Seeds = append(a.Seeds, b.Seed)
		means, p99s = append(means, b.TTFT.Mean), append(p99s, b.TTFT.P99)
	}
	a.TTFTMean, a.TTFTP99 = NewStat(means), NewStat(p99s)
	return a, len(means) > 0
}

// boundsAt yields the lower bounds of workload's points at rate that have a TTFT, one per
// seed.
func boundsAt(bounds []Bound, workload string, rate float64) iter.Seq[Bound] {
	return func(yield func(Bound) bool) {
		for _, b := range bounds {
			if b.Workload == workload && b.Rate == rate && b.TTFT.Count > 0 && !yield(b) {
				return
			}
		}
	}
}
