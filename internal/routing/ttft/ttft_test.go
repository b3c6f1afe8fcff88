package ttft_test

import (
	"math"
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
	tests := []struct {
		name string
		c    routing.Candidate
		want float64
	}{
		{"no metrics: nothing known to wait for", candidate(20, nil), 0},
		{"free slots", candidate(7, &endpoint.Metrics{Running: 7, LocalInFlight: 7, Profile: prof}), 0},
		{"full: one slot to free", candidate(8, &endpoint.Metrics{Running: 8, LocalInFlight: 8, Profile: prof}), 1.6 / 8},
		{"queued on the engine", candidate(0, &endpoint.Metrics{Running: 8, Waiting: 3, Profile: prof}), 4 * 1.6 / 8},
		{"sent since the scrape count", candidate(10, &endpoint.Metrics{Running: 8, LocalInFlight: 8, Profile: prof}), 3 * 1.6 / 8},
		{"finished since the scrape count", candidate(6, &endpoint.Metrics{Running: 8, Waiting: 1, LocalInFlight: 9, Profile: prof}), 0},
		{"slots unknown: queued and sent since are ahead", candidate(3, &endpoint.Metrics{Running: 2, Waiting: 1, LocalInFlight: 2, Profile: unknownSlots}), 2 * 1.6 / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands := []routing.Candidate{tt.c}
			est := ttft.New(cands)
			if got := est.Wait(&cands[0]); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Wait = %g, want %g", got, tt.want)
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
	est := ttft.New(cands)
	mean := (0.0005*3 + 0.0006 + 0.0012) / 5
	want := []float64{mean, mean, mean, mean, 0.0012, mean, mean}
	for i := range cands {
		if got := est.TTFT(&cands[i], 1000) / 1000; math.Abs(got-want[i]) > 1e-12 {
			t.Errorf("candidate %d: prefill per token %g, want %g", i, got, want[i])
		}
	}
}

func TestPriorsWhenNothingIsLearnt(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 2)
	rc := fleet.Context(routing.Request{})
	cands := routingtest.Candidates(rc)
	est := ttft.New(cands)
	if got, want := est.TTFT(&cands[0], 1000), 1000*ttft.PriorPrefillPerToken; math.Abs(got-want) > 1e-12 {
		t.Errorf("TTFT = %g, want the prior %g", got, want)
	}
	if got, want := est.Latency(&cands[0], 0, 10), 10*ttft.PriorDecodePerToken; math.Abs(got-want) > 1e-12 {
		t.Errorf("Latency of 10 output tokens = %g, want the prior %g", got, want)
	}
}
