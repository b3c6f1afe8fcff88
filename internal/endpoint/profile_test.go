package endpoint

import (
	"math"
	"testing"
	"time"
)

// engine is a simulated engine's cumulative counters, advanced one scrape at a time.
type engine struct {
	m Metrics
}

// serve records n requests of uncached prompt tokens each (cached more held), with the
// given prefill and running seconds each, in the next scrape.
func (e *engine) serve(n int, uncached, cached, prefill, running float64) Metrics {
	prev := e.m
	e.m.PromptTokens += float64(n) * (uncached + cached)
	e.m.PrefixCacheQueries += float64(n) * (uncached + cached)
	e.m.PrefixCacheHits += float64(n) * cached
	e.m.PrefillTime = Histogram{Count: prev.PrefillTime.Count + uint64(n), Sum: prev.PrefillTime.Sum + float64(n)*prefill}
	e.m.InferenceTime = Histogram{Count: prev.InferenceTime.Count + uint64(n), Sum: prev.InferenceTime.Sum + float64(n)*running}
	e.m.TTFT = Histogram{Count: prev.TTFT.Count + uint64(n), Sum: prev.TTFT.Sum + float64(n)*prefill}
	e.m.E2E = Histogram{Count: prev.E2E.Count + uint64(n), Sum: prev.E2E.Sum + float64(n)*running}
	e.m.TPOT = Histogram{Count: prev.TPOT.Count + uint64(n)*10, Sum: prev.TPOT.Sum + float64(n)*10*0.015}
	return e.m
}

func TestProfileLearnsRatesFromScrapeDeltas(t *testing.T) {
	var e engine
	var p Profile
	prev := e.m
	// A lone probe: a few tokens, quick. Not evidence enough.
	cur := e.serve(1, 5, 0, 0.02, 0.03)
	p = p.Next(&prev, &cur)
	if p.Learnt() {
		t.Fatalf("learnt from one probe: %+v", p)
	}
	// Then steady work: 2 requests a scrape of 1000 uncached and 1000 cached tokens,
	// prefilled at 0.2 ms a token, running 1.2 s each.
	for range 100 {
		prev = e.m
		cur = e.serve(2, 1000, 1000, 0.2, 1.2)
		p = p.Next(&prev, &cur)
	}
	if !p.Learnt() {
		t.Fatalf("not learnt after 200 requests: %+v", p)
	}
	if got := p.PrefillPerToken; math.Abs(got-0.0002) > 0.00001 {
		t.Errorf("PrefillPerToken = %g, want about 0.0002 (cached tokens cost nothing)", got)
	}
	if got := p.Service; math.Abs(got-1.2) > 0.05 {
		t.Errorf("Service = %g, want about 1.2", got)
	}
	if got := p.DecodePerToken; !(math.Abs(got-0.015) <= 1e-9) {
		t.Errorf("DecodePerToken = %g, want 0.015", got)
	}
	if got := p.Decode; !(math.Abs(got-1.0) <= 0.01) {
		t.Errorf("Decode = %g, want about 1.0 (end to end less time to first token, without a decode-time histogram)", got)
	}
	// The engine slows down: recent scrapes outweigh old ones within a few seconds.
	for range 150 {
		prev = e.m
		cur = e.serve(2, 1000, 0, 0.4, 2.4)
		p = p.Next(&prev, &cur)
	}
	if got := p.PrefillPerToken; math.Abs(got-0.0004) > 0.00002 {
		t.Errorf("after a slow-down PrefillPerToken = %g, want about 0.0004", got)
	}
}

func TestProfileServiceWithoutInferenceHistogram(t *testing.T) {
	prev := Metrics{E2E: Histogram{Count: 10, Sum: 20}, QueueTime: Histogram{Count: 10, Sum: 5}}
	cur := Metrics{E2E: Histogram{Count: 20, Sum: 40}, QueueTime: Histogram{Count: 20, Sum: 10}}
	p := Profile{}.Next(&prev, &cur)
	if got := p.Service; !(math.Abs(got-1.5) <= 1e-9) {
		t.Errorf("Service = %g, want 1.5 (end to end less queueing)", got)
	}
}

func TestProfileDecodeFromTheDecodeHistogram(t *testing.T) {
	prev := Metrics{E2E: Histogram{Count: 10, Sum: 20}, TTFT: Histogram{Count: 10, Sum: 2}, DecodeTime: Histogram{Count: 10, Sum: 15}}
	cur := Metrics{E2E: Histogram{Count: 20, Sum: 40}, TTFT: Histogram{Count: 20, Sum: 4}, DecodeTime: Histogram{Count: 20, Sum: 30}}
	p := Profile{}.Next(&prev, &cur)
	if got := p.Decode; !(math.Abs(got-1.5) <= 1e-9) {
		t.Errorf("Decode = %g, want 1.5, the decode-time histogram's mean, over end to end less time to first token", got)
	}
}

func TestProfileSlots(t *testing.T) {
	var p Profile
	p = p.Next(nil, &Metrics{Running: 5})
	if p.Slots != 0 {
		t.Errorf("Slots = %g before the engine queued, want 0", p.Slots)
	}
	p = p.Next(nil, &Metrics{Running: 8, Waiting: 2})
	if p.Slots != 8 {
		t.Errorf("Slots = %g with 8 running and 2 waiting, want 8", p.Slots)
	}
	p = p.Next(nil, &Metrics{Running: 10})
	if p.Slots != 10 {
		t.Errorf("Slots = %g after 10 ran without queueing, want 10", p.Slots)
	}
	p = p.Next(nil, &Metrics{Running: 6, Waiting: 1})
	if p.Slots != 6 {
		t.Errorf("Slots = %g after it queued at 6 (a full KV cache), want 6", p.Slots)
	}
}

func TestProfileEpochGrowsOnRestart(t *testing.T) {
	var e engine
	var p Profile
	for range 3 {
		prev := e.m
		cur := e.serve(1, 100, 0, 0.02, 1)
		p = p.Next(&prev, &cur)
	}
	if p.Epoch != 0 {
		t.Fatalf("Epoch = %d without a restart", p.Epoch)
	}
	before := p
	prev := e.m
	restarted := Metrics{PromptTokens: 10, E2E: Histogram{Count: 1, Sum: 1}, TTFT: Histogram{Count: 1, Sum: 0.1}}
	p = p.Next(&prev, &restarted)
	if p.Epoch != 1 {
		t.Errorf("Epoch = %d after the counters went back, want 1", p.Epoch)
	}
	if p.PrefillPerToken != before.PrefillPerToken || p.Service != before.Service {
		t.Errorf("a restart's interval taught rates: %+v, want those of %+v", p, before)
	}
}

func TestProfileThroughputIsTheLastInterval(t *testing.T) {
	at := time.Unix(1700000000, 0)
	scrape := func(prompt, generation float64, after time.Duration) Metrics {
		return Metrics{PromptTokens: prompt, GenerationTokens: generation, ScrapedAt: at.Add(after)}
	}
	first := scrape(1000, 3000, 0)
	p := Profile{}.Next(nil, &first)
	if p.ThroughputKnown {
		t.Fatalf("throughput known after one scrape: %+v", p)
	}
	steps := []struct {
		cur  Metrics
		want float64 // tokens per second; NaN: not known
	}{
		{scrape(1100, 3300, 500*time.Millisecond), 800},     // 400 tokens in 0.5 s
		{scrape(1100, 3300, 500*time.Millisecond), 800},     // no time passed: the rate stands
		{scrape(1100, 3300, time.Second), 0},                // idle
		{scrape(1300, 3400, 1100*time.Millisecond), 3000},   // 300 tokens in 0.1 s
		{scrape(10, 20, 1200*time.Millisecond), math.NaN()}, // a restart
		{scrape(40, 40, 1300*time.Millisecond), 500},        // 50 tokens in 0.1 s, in the new epoch
	}
	prev := first
	for i, s := range steps {
		p = p.Next(&prev, &s.cur)
		prev = s.cur
		if math.IsNaN(s.want) {
			if p.ThroughputKnown {
				t.Errorf("step %d: throughput %v known, want not known", i, p.Throughput)
			}
			continue
		}
		if !p.ThroughputKnown || !(math.Abs(p.Throughput-s.want) <= 1e-3) {
			t.Errorf("step %d: throughput %v (known %t), want %v", i, p.Throughput, p.ThroughputKnown, s.want)
		}
	}
}
