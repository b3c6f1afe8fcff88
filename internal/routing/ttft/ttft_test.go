package ttft_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/ttft"
)

// learnt returns a profile with enough evidence to count.
func learnt(prefill, service float64, slots float64) endpoint.Profile {
	return endpoint.Profile{PrefillPerToken: prefill, Service: service, DecodePerToken: 0.02, Slots: slots,
		PrefilledTokens: 1e6, Requests: 1e3}
}

func candidate(inFlight int64, m *endpoint.Metrics) routing.Candidate {
	if m != nil {
		m.ScrapedAt = time.Now()
	}
	return routing.Candidate{InFlight: inFlight, Metrics: m}
}

func TestWait(t *testing.T) {
	prof := learnt(0.0002, 1.6, 8)
	unknownSlots := learnt(0.0002, 1.6, 0)
	// spread is the age of requests whose starts spread over the last service time: the
	// first slot frees after service/slots.
	const spread = 0.8
	tests := []struct {
		name string
		en   ttft.Engine
		want float64
	}{
		{"no metrics: nothing known to wait for", ttft.Engine{InFlight: 20}, 0},
		{"free slots", known(7, spread, endpoint.Metrics{Running: 7, LocalInFlight: 7, Profile: prof}), 0},
		{"full: one slot to free", known(8, spread, endpoint.Metrics{Running: 8, LocalInFlight: 8, Profile: prof}), 1.6 / 8},
		{"queued on the engine", known(0, 0, endpoint.Metrics{Running: 8, Waiting: 3, Profile: prof}), 4 * 1.6 / 8},
		{"sent since the scrape count", known(10, spread, endpoint.Metrics{Running: 8, LocalInFlight: 8, Profile: prof}), 3 * 1.6 / 8},
		{"finished since the scrape count", known(6, spread, endpoint.Metrics{Running: 8, Waiting: 1, LocalInFlight: 9, Profile: prof}), 0},
		{"full of young requests: the first slot frees late", known(8, 0.2, endpoint.Metrics{Running: 8, LocalInFlight: 8, Profile: prof}), 1.6 - 2*0.2},
		{"full of requests started together: a whole service time", known(8, 0, endpoint.Metrics{Running: 8, LocalInFlight: 8, Profile: prof}), 1.6},
		{"young requests, two ahead", known(9, 0.5, endpoint.Metrics{Running: 8, LocalInFlight: 8, Profile: prof}), 1.6 - 2*0.5 + 1.6/8},
		{"slots unknown, a queue: queued and sent since are ahead", known(3, 1, endpoint.Metrics{Running: 2, Waiting: 1, LocalInFlight: 2, Profile: unknownSlots}), 2 * 1.6 / 2},
		{"slots unknown, no queue: sent since join the batch", known(9, 0, endpoint.Metrics{Running: 2, LocalInFlight: 2, Profile: unknownSlots}), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fleet ttft.Fleet
			fleet.Add(prof.Speed(), 0) // the fleet's slots unknown too
			est := fleet.Estimator(time.Now())
			if got := est.Predict(&tt.en, 0, 0); !(math.Abs(got-tt.want) <= 1e-9) {
				t.Errorf("predicted wait = %g, want %g", got, tt.want)
			}
		})
	}
}

func TestUnknownSlotsAreTheFleets(t *testing.T) {
	var fleet ttft.Fleet
	prof := learnt(0.0002, 1.6, 8)
	fleet.Add(prof.Speed(), 6)
	fleet.Add(prof.Speed(), 10)
	est := fleet.Estimator(time.Now())
	// Never seen queueing: with the fleet's mean of 8 slots, 9 running plus 1 sent since
	// put three ahead, the first slot freeing after 1.6/8 for requests of spread ages.
	en := known(10, 0.8, endpoint.Metrics{Running: 9, LocalInFlight: 9, Profile: learnt(0.0002, 1.6, 0)})
	if got, want := est.Predict(&en, 0, 0), 3*1.6/8; !(math.Abs(got-want) <= 1e-9) {
		t.Errorf("predicted wait = %g, want %g", got, want)
	}
}

// known returns an engine with fresh metrics m and this process's inFlight requests of
// mean age age there.
func known(inFlight int64, age float64, m endpoint.Metrics) ttft.Engine {
	return ttft.Engine{InFlight: inFlight, Ages: meanAge(age), Known: true, Queue: m.Queue(), Speed: m.Profile.Speed()}
}

// meanAge is a mean age, in seconds, whatever the time, of requests none of which
// decodes.
type meanAge float64

func (a meanAge) MeanAge(time.Time) time.Duration {
	return time.Duration(float64(a) * float64(time.Second))
}

func (meanAge) DecodeEnd(time.Time, int, float64, float64) (time.Duration, int) { return 0, 0 }

// decodes are the decoding requests, whatever the time; their mean age, were it asked,
// is absurd.
type decodes []struct {
	age       float64 // seconds decoded
	maxTokens int64
}

func (decodes) MeanAge(time.Time) time.Duration { return 1000 * time.Hour }

func (d decodes) DecodeEnd(_ time.Time, k int, perToken, decode float64) (time.Duration, int) {
	var ends []float64
	for _, dc := range d {
		t := decode
		if dc.maxTokens > 0 {
			t = min(t, float64(dc.maxTokens)*perToken)
		}
		ends = append(ends, max(t-dc.age, 0))
	}
	rank := min(k, len(ends))
	if rank == 0 {
		return 0, 0
	}
	slices.Sort(ends)
	return time.Duration(ends[rank-1] * float64(time.Second)), rank
}

// TestWaitForDecodes checks that, where requests decode, the k-th request ahead waits
// for the k-th decode's expected end, after the engine's decode time or the request's
// max tokens, and those beyond them for one slot each after.
func TestWaitForDecodes(t *testing.T) {
	prof := learnt(0.0002, 1.6, 8) // 0.02 s per output token
	prof.Decode = 1
	est := ttft.New([]routing.Candidate{candidate(0, &endpoint.Metrics{Profile: prof})}, time.Now())
	full := endpoint.Metrics{Running: 8, LocalInFlight: 8, Profile: prof}
	three := decodes{{0.95, 0}, {0.7, 0}, {0.1, 0}} // ending in 0.05, 0.3 and 0.9 s
	tests := []struct {
		name     string
		inFlight int64
		decodes  decodes
		want     float64
	}{
		{"one ahead: the first end", 8, three, 0.05},
		{"three ahead: the third end", 10, three, 0.9},
		{"five ahead: the last end, then a slot per request beyond", 12, three, 0.9 + 2*1.6/8},
		{"a free slot: no wait", 7, three, 0},
		{"one ahead beside a short request: the first end still", 8, append(decodes{{0.1, 10}}, three...), 0.05},
		{"two ahead: the short request's end, within its tokens", 9, append(decodes{{0.1, 10}}, three...), 10*0.02 - 0.1},
		{"nothing decodes: the mean age decides (requests long running: service/slots)", 8, nil, 1.6 / 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			en := ttft.Engine{InFlight: tt.inFlight, Ages: tt.decodes, Known: true, Queue: full.Queue(), Speed: prof.Speed(), Decode: prof.Decode}
			if got := est.Predict(&en, 0, 0); !(math.Abs(got-tt.want) <= 1e-9) {
				t.Errorf("predicted wait = %g, want %g", got, tt.want)
			}
		})
	}
}

func TestSpeedsArePooledUnlessDistinct(t *testing.T) {
	cands := []routing.Candidate{
		candidate(0, &endpoint.Metrics{Profile: learnt(0.0005, 1, 8)}),
		candidate(0, &endpoint.Metrics{Profile: learnt(0.0005, 1, 8)}),
		candidate(0, &endpoint.Metrics{Profile: learnt(0.0006, 1, 8)}), // within the factor: the mean
		candidate(0, &endpoint.Metrics{Profile: learnt(0.0005, 1, 8)}),
		candidate(0, &endpoint.Metrics{Profile: learnt(0.0012, 1, 8)}),                             // distinct: its own
		candidate(0, &endpoint.Metrics{Profile: endpoint.Profile{}}),                               // not learnt: the mean
		candidate(0, &endpoint.Metrics{Profile: endpoint.Profile{PrefillPerToken: 1, Service: 1}}), // too little evidence
	}
	est := ttft.New(cands, time.Now())
	mean := (0.0005*3 + 0.0006 + 0.0012) / 5
	want := []float64{mean, mean, mean, mean, 0.0012, mean, mean}
	for i := range cands {
		if got := est.TTFT(&cands[i], 1000) / 1000; !(math.Abs(got-want[i]) <= 1e-12) {
			t.Errorf("candidate %d: prefill per token %g, want %g", i, got, want[i])
		}
	}
}

func TestPriorsWhenNothingIsLearnt(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 2)
	rc := fleet.Context(routing.Request{})
	cands := routingtest.Candidates(rc)
	est := ttft.New(cands, time.Now())
	if got, want := est.TTFT(&cands[0], 1000), 1000*ttft.PriorPrefillPerToken; !(math.Abs(got-want) <= 1e-12) {
		t.Errorf("TTFT = %g, want the prior %g", got, want)
	}
	if got, want := est.Latency(&cands[0], 0, 10), 10*ttft.PriorDecodePerToken; !(math.Abs(got-want) <= 1e-12) {
		t.Errorf("Latency of 10 output tokens = %g, want the prior %g", got, want)
	}
}

// TestCellIsTTFT checks, over random fleets, that the prediction from a candidate's hot
// cell (Unknown, or FromCell) is the one from the candidate, to the last bit, whether
// the request would wait there or not, and with output tokens, Latency; and that no
// prediction falls below the fleet's PrefillFloor, which some reach.
func TestCellIsTTFT(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 7))
	floored := 0
	defer func() {
		if floored == 0 {
			t.Error("no prediction was at the prefill floor: the floor is looser than it need be")
		}
	}()
	for iter := range 300 {
		pods := 1 + rnd.IntN(8)
		fleet := routingtest.NewFleet("llama", pods)
		for i := range pods {
			m := endpoint.Metrics{Running: float64(rnd.IntN(10)), Waiting: float64(rnd.IntN(3)),
				LocalInFlight: int64(rnd.IntN(4))}
			if rnd.IntN(3) > 0 {
				m.Profile = learnt(1e-4*float64(1+rnd.IntN(4)), float64(1+rnd.IntN(3)), float64(rnd.IntN(9)))
				m.Profile.DecodePerToken = 0.01 * float64(rnd.IntN(5)) // 0: not learnt
			}
			if rnd.IntN(4) > 0 {
				fleet.SetMetrics(i, m)
			}
			fleet.Reserve(i, rnd.IntN(10))
		}
		rc := fleet.Context(routing.Request{})
		cands := routingtest.Candidates(rc)
		est := ttft.New(cands, rc.Now)
		for i := range cands {
			uncached := float64(rnd.IntN(2000))
			want := est.TTFT(&cands[i], uncached)
			h, n := rc.Cells[i], cands[i].InFlight
			got := est.Unknown(uncached)
			if cands[i].Metrics != nil {
				got = est.FromCell(h, cands[i].Pod, n, uncached, 0)
				output := float64(rnd.IntN(500))
				if got, want := est.FromCell(h, cands[i].Pod, n, uncached, output), est.Latency(&cands[i], uncached, output); got != want {
					t.Fatalf("iteration %d, pod %d: FromCell with %g output tokens = %g, Latency = %g", iter, i, output, got, want)
				}
			}
			if got != want {
				t.Fatalf("iteration %d, pod %d: Cell = %g, TTFT = %g", iter, i, got, want)
			}
			if floor := est.PrefillFloor(uncached); got < floor {
				t.Fatalf("iteration %d, pod %d: TTFT %g for %g uncached tokens is below the prefill floor %g", iter, i, got, uncached, floor)
			}
			if uncached > 0 && got == est.PrefillFloor(uncached) {
				floored++
			}
		}
	}
}
