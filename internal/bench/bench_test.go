package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

func TestPoissonSchedule(t *testing.T) {
	const rate, seconds = 50.0, 200
	s := PoissonSchedule(rate, seconds*time.Second, 7)
	if got, want := float64(len(s)), rate*seconds; math.Abs(got-want) > 4*math.Sqrt(want) {
		t.Errorf("%v arrivals, want about %v", got, want)
	}
	for i := 1; i < len(s); i++ {
		if s[i] < s[i-1] {
			t.Fatalf("offsets not sorted at %d: %v < %v", i, s[i], s[i-1])
		}
	}
	if last := s[len(s)-1]; last >= seconds*time.Second {
		t.Errorf("last offset %v beyond the window", last)
	}
	// Exponential gaps: the coefficient of variation of the gaps is about 1.
	var sum, sq float64
	for i := 1; i < len(s); i++ {
		g := (s[i] - s[i-1]).Seconds()
		sum += g
		sq += g * g
	}
	n := float64(len(s) - 1)
	mean := sum / n
	if cv := math.Sqrt(sq/n-mean*mean) / mean; math.Abs(cv-1) > 0.1 {
		t.Errorf("gap CV = %.2f, want about 1", cv)
	}
	if again := PoissonSchedule(rate, seconds*time.Second, 7); len(again) != len(s) || again[len(s)/2] != s[len(s)/2] {
		t.Error("same seed, different schedule")
	}
	if other := PoissonSchedule(rate, seconds*time.Second, 8); len(other) > 0 && other[0] == s[0] {
		t.Error("different seeds, same first arrival")
	}
	if PoissonSchedule(0, time.Second, 1) != nil || PoissonSchedule(1, 0, 1) != nil {
		t.Error("no arrivals expected for a zero rate or duration")
	}
}

func TestPercentile(t *testing.T) {
	sorted := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ q, want float64 }{
		{0, 1}, {0.5, 5.5}, {0.9, 9.1}, {0.99, 9.91}, {1, 10}, {-1, 1}, {2, 10},
	} {
		if got := Percentile(sorted, c.q); !(math.Abs(got-c.want) <= 1e-9) {
			t.Errorf("Percentile(q=%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := Percentile([]float64{42}, 0.99); got != 42 {
		t.Errorf("single sample: %v", got)
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("empty: want NaN")
	}
}

func TestSummarize(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(samples)
	if s.Count != 100 || s.Mean != 50.5 || s.P50 != 50.5 || s.Max != 100 || !(math.Abs(s.P99-99.01) <= 1e-9) {
		t.Errorf("Summarize = %+v", s)
	}
	if samples[0] != 100*time.Millisecond {
		t.Error("Summarize modified its input")
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("empty sample: want a zero Summary")
	}
}

func TestNewSpread(t *testing.T) {
	if s := NewSpread([]float64{5, 5, 5, 5}); s.CV != 0 || s.MaxOverMean != 1 {
		t.Errorf("even: %+v", s)
	}
	if s := NewSpread([]float64{8, 0, 0, 0}); !(math.Abs(s.CV-math.Sqrt(3)) <= 1e-9) || s.MaxOverMean != 4 {
		t.Errorf("one engine: %+v", s)
	}
	if s := NewSpread([]float64{0, 0}); s.CV != 0 {
		t.Errorf("idle: %+v", s)
	}
}

func TestParseGoBench(t *testing.T) {
	out := `goos: linux
BenchmarkGatewayOverhead/prompt=short/stream=false/direct-2  	    1000	     51009 ns/op	   2.51 MB/s	         0.3084 p50-ms	         2.499 p99-ms	     19605 req/s	    5566 B/op	      68 allocs/op
BenchmarkGatewayOverhead/prompt=short/stream=false/gateway-2 	    1000	    123023 ns/op	   1.04 MB/s	         0.7411 p50-ms	         4.014 p99-ms	      8129 req/s	   48345 B/op	     212 allocs/op
BenchmarkRoute/random/endpoints=1000/parallel-2   5000   240 ns/op   0 B/op   0 allocs/op
PASS
ok  	github.com/switchboard-llm/switchboard/internal/gateway	24.150s
`
	bs, err := ParseGoBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 3 {
		t.Fatalf("%d results, want 3", len(bs))
	}
	if bs[0].Name != "BenchmarkGatewayOverhead/prompt=short/stream=false/direct" || bs[0].Iterations != 1000 || bs[0].Metrics["p99-ms"] != 2.499 {
		t.Errorf("first = %+v", bs[0])
	}
	if bs[2].Name != "BenchmarkRoute/random/endpoints=1000/parallel" || bs[2].Metrics["ns/op"] != 240 {
		t.Errorf("third = %+v", bs[2])
	}
	cases := gatewayCases(bs)
	if len(cases) != 1 || cases[0].prompt != "short" || cases[0].stream != "false" || cases[0].gateway["req/s"] != 8129 {
		t.Errorf("gatewayCases = %+v", cases)
	}
}

func TestMergeRunsTakesEachBenchmarksMedian(t *testing.T) {
	out := `BenchmarkRoute/random/endpoints=1000-2   1000   300 ns/op   0 allocs/op
BenchmarkRoute/random/endpoints=1000-2   1000   250 ns/op   0 allocs/op
BenchmarkRoute/random/endpoints=1000/parallel-2   1000   180 ns/op   0 allocs/op
BenchmarkRoute/random/endpoints=1000-2   1000   900 ns/op   0 allocs/op
BenchmarkRoute/random/endpoints=1000/parallel-2   1000   200 ns/op   0 allocs/op
BenchmarkListEndpoints/snapshot/serial-2   1000   100 ns/op   1 allocs/op
BenchmarkLineTransfer-2   1000000   230 ns/op
BenchmarkLineTransfer-2   1000000   250 ns/op
`
	bs, err := ParseGoBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	merged := MergeRuns(bs)
	if len(merged) != 4 {
		t.Fatalf("%d merged results, want 4: %+v", len(merged), merged)
	}
	serial, parallel, once := merged[0], merged[1], merged[2]
	if serial.Name != "BenchmarkRoute/random/endpoints=1000" || serial.Metrics["ns/op"] != 300 || serial.Iterations != 3000 {
		t.Errorf("serial = %+v, want the median 300 ns/op of three runs", serial)
	}
	if r := serial.Runs["ns/op"]; r.Min != 250 || r.Max != 900 || r.N != 3 {
		t.Errorf("serial runs = %+v, want 250–900 over 3", r)
	}
	if parallel.Metrics["ns/op"] != 190 {
		t.Errorf("parallel = %+v, want the mean of the middle two, 190 ns/op", parallel)
	}
	if once.Name != "BenchmarkListEndpoints/snapshot/serial" || once.Runs != nil || once.Metrics["allocs/op"] != 1 {
		t.Errorf("a benchmark that ran once = %+v, want it as it was", once)
	}
	var md strings.Builder
	renderMicro(func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }, merged)
	for _, want := range []string{
		"| random/endpoints=1000 | 300 (250–900) | 190 (180–200) | 1.58× | – | 0 |",
		"A cache line written on one core reached the other in 240 (230–250) ns",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
}

// wantKind returns the kind of request r of workload: a conversation's turn and a hot
// question start with a system prompt, a unique prompt is the user's alone.
func wantKind(workload string, r Request) string {
	switch {
	case r.Messages[0].Role != "system":
		return KindUnique
	case workload == "shared-prefix":
		return KindTurn
	}
	return KindHot
}

func TestWorkloadsAreDeterministicAndSalted(t *testing.T) {
	for _, w := range Workloads() {
		a := w.Generate(rand.New(rand.NewPCG(1, 2)), 50, "[salt-1]")
		b := w.Generate(rand.New(rand.NewPCG(1, 2)), 50, "[salt-1]")
		c := w.Generate(rand.New(rand.NewPCG(1, 2)), 50, "[salt-2]")
		if len(a) != 50 {
			t.Fatalf("%s: %d requests", w.Name, len(a))
		}
		for i := range a {
			if a[i].Messages[0].Content != b[i].Messages[0].Content {
				t.Fatalf("%s: request %d differs for the same seed", w.Name, i)
			}
			if a[i].Messages[0].Content == c[i].Messages[0].Content {
				t.Fatalf("%s: request %d does not depend on the salt", w.Name, i)
			}
			if !strings.HasPrefix(a[i].Messages[0].Content, "[salt-1]") {
				t.Fatalf("%s: request %d does not start with the salt", w.Name, i)
			}
			if a[i].Kind != wantKind(w.Name, a[i]) {
				t.Fatalf("%s: request %d is of kind %q, want %q", w.Name, i, a[i].Kind, wantKind(w.Name, a[i]))
			}
		}
	}
	// Multi-turn: some user's conversation grows.
	reqs := sharedPrefix(rand.New(rand.NewPCG(3, 4)), 200, "s")
	longest := 0
	for _, r := range reqs {
		longest = max(longest, len(r.Messages))
	}
	if longest < 5 {
		t.Errorf("longest conversation has %d messages, want multi-turn histories", longest)
	}
}

func TestWorkloadList(t *testing.T) {
	want := []string{"shared-prefix", "no-sharing", "hot-prefix", "fast-fail"}
	if got := WorkloadNames(); !slices.Equal(got, want) {
		t.Fatalf("WorkloadNames() = %v, want %v", got, want)
	}
	for _, w := range Workloads() {
		wantFailing := 0
		if w.Name == "fast-fail" {
			wantFailing = 1
		}
		if w.FailingEngines != wantFailing {
			t.Errorf("%s: FailingEngines = %d, want %d", w.Name, w.FailingEngines, wantFailing)
		}
		if w.Title == "" || w.Description == "" || w.Generate == nil {
			t.Errorf("%s: incomplete workload %+v", w.Name, w)
		}
	}
	// fast-fail sends the no-sharing traffic.
	ws := Workloads()
	a := ws[1].Generate(rand.New(rand.NewPCG(1, 2)), 20, "s")
	b := ws[3].Generate(rand.New(rand.NewPCG(1, 2)), 20, "s")
	for i := range a {
		if a[i].Messages[0].Content != b[i].Messages[0].Content {
			t.Fatalf("fast-fail request %d differs from no-sharing", i)
		}
	}
}

func TestFailedShare(t *testing.T) {
	if got := (PointResult{Sent: 8, Failed: 2}).FailedShare(); got != 0.25 {
		t.Errorf("FailedShare = %v, want 0.25", got)
	}
	if got := (PointResult{}).FailedShare(); got != 0 {
		t.Errorf("nothing sent: FailedShare = %v, want 0", got)
	}
}

func TestRunSeeds(t *testing.T) {
	if got := runSeeds(7, 3); !slices.Equal(got, []uint64{7, 8, 9}) {
		t.Errorf("runSeeds(7, 3) = %v", got)
	}
	if got := runSeeds(7, 0); !slices.Equal(got, []uint64{7}) {
		t.Errorf("runSeeds(7, 0) = %v, want the base seed alone", got)
	}
}

func TestNewStat(t *testing.T) {
	in := []float64{30, 10, 20}
	if got := NewStat(in); got != (Stat{Median: 20, Min: 10, Max: 30, N: 3}) {
		t.Errorf("NewStat(%v) = %+v", in, got)
	}
	if !slices.Equal(in, []float64{30, 10, 20}) {
		t.Error("NewStat modified its input")
	}
	if got := NewStat([]float64{4, 1, 3, 2}); got.Median != 2.5 {
		t.Errorf("even count: median %v, want the mean of the middle two", got.Median)
	}
	if got := NewStat(nil); got.N != 0 {
		t.Errorf("no values: %+v", got)
	}
}

func TestMedianRatio(t *testing.T) {
	if q, ok := MedianRatio(NewStat([]float64{9, 10, 12}), NewStat([]float64{20, 25, 30})); !ok || !(math.Abs(q-0.4) <= 1e-12) {
		t.Errorf("ratio = %v, %v; want 10/25", q, ok)
	}
	if _, ok := MedianRatio(NewStat([]float64{1}), Stat{}); ok {
		t.Error("a reference without values has no ratio")
	}
	if _, ok := MedianRatio(Stat{}, NewStat([]float64{1})); ok {
		t.Error("a strategy without values has no ratio")
	}
	if _, ok := MedianRatio(NewStat([]float64{1}), NewStat([]float64{0})); ok {
		t.Error("a zero reference has no ratio")
	}
}

// point is a fixture: a per-seed point where every one of sent requests completed, with
// the given TTFT mean and a p99 of four times it.
func point(workload, strategy string, rate float64, seed uint64, ttftMean float64) PointResult {
	return PointResult{Workload: workload, Strategy: strategy, Rate: rate, Seed: seed, Sent: 10, Completed: 10,
		TTFT: Summary{Count: 10, Mean: ttftMean, P99: 4 * ttftMean}, E2E: Summary{Count: 10, Mean: 2 * ttftMean},
		Throughput: 9, PrefixQueries: 100, PrefixHits: 50, HitRate: 0.5, Spread: NewSpread([]float64{5, 5})}
}

func (p PointResult) failing(failed int) PointResult {
	p.Failed, p.Completed = failed, p.Sent-failed
	if p.Completed == 0 {
		p.TTFT, p.E2E = Summary{}, Summary{}
	}
	return p
}

func TestAggregates(t *testing.T) {
	res := &Results{
		Settings:   Settings{Rates: []float64{10, 30}},
		Strategies: []string{"random", "prefix-cache"},
		Workloads:  []WorkloadInfo{{Name: "hot-prefix"}, {Name: "fast-fail"}},
	}
	// Measured out of the listed order, and one seed of prefix-cache at 30 req/s failed all.
	for seed, ttft := range map[uint64]float64{1: 30, 2: 10, 3: 20} {
		res.Points = append(res.Points,
			point("fast-fail", "random", 10, seed, ttft).failing(int(seed)),
			point("hot-prefix", "prefix-cache", 30, seed, ttft),
			point("hot-prefix", "random", 30, seed, ttft*2),
			point("hot-prefix", "random", 10, seed, ttft*3))
	}
	res.Points = append(res.Points, point("hot-prefix", "prefix-cache", 30, 4, 5).failing(10))
	aggs := Aggregates(res)
	var order []string
	for _, a := range aggs {
		order = append(order, fmt.Sprintf("%s/%s/%g", a.Workload, a.Strategy, a.Rate))
	}
	if want := []string{"hot-prefix/random/10", "hot-prefix/random/30", "hot-prefix/prefix-cache/30", "fast-fail/random/10"}; !slices.Equal(order, want) {
		t.Fatalf("aggregates in order %v, want %v", order, want)
	}
	pc := aggs[2]
	if pc.TTFTMean != (Stat{Median: 20, Min: 10, Max: 30, N: 3}) {
		t.Errorf("prefix-cache TTFT mean = %+v; the seed without completions must not count", pc.TTFTMean)
	}
	if pc.TTFTP99.Median != 80 || pc.E2EMean.Median != 40 {
		t.Errorf("prefix-cache p99 %+v, e2e %+v", pc.TTFTP99, pc.E2EMean)
	}
	if pc.FailedShare.N != 4 || pc.FailedShare.Max != 1 || pc.FailedShare.Median != 0 {
		t.Errorf("prefix-cache failed share = %+v; every seed counts", pc.FailedShare)
	}
	if !slices.Equal(slices.Sorted(slices.Values(pc.Seeds)), []uint64{1, 2, 3, 4}) || pc.Sent != 40 || pc.Completed != 30 || pc.Failed != 10 {
		t.Errorf("prefix-cache seeds %v, totals %d/%d/%d", pc.Seeds, pc.Sent, pc.Completed, pc.Failed)
	}
	if got := aggs[0].TTFTMean.Median; got != 60 {
		t.Errorf("random at 10 req/s: median %v, want 60", got)
	}
	ff := aggs[3]
	if !(math.Abs(ff.FailedShare.Median-0.2) <= 1e-12) || !(math.Abs(ff.FailedShare.Max-0.3) <= 1e-12) {
		t.Errorf("fast-fail failed share = %+v, want median 2/10 and max 3/10", ff.FailedShare)
	}
}

// headlineResults has three strategies on shared-prefix and fast-fail at two rates and
// three seeds. The TTFT means of a seed scale with the rate; their medians over the seeds
// are random 50, least-request 25 and prefix-cache 10 (range 9-12) at 10 req/s.
func headlineResults() *Results {
	res := &Results{
		Machine: Machine{CPUs: 2, CPUModel: "Test CPU", GoVersion: "go1.x", OS: "linux/amd64", Date: "2026-01-01T00:00:00Z"},
		Settings: Settings{Engines: 8, Rates: []float64{10, 30}, Duration: 6, TimeScale: 1, Seed: 1, Seeds: []uint64{1, 2, 3},
			Policies:      map[string]string{"random": "random", "least-request": "least-request", "prefix-cache": "prefix-cache"},
			RetryAttempts: map[string]int{"random": 2, "least-request": 2, "prefix-cache": 1}},
		Strategies: []string{"random", "least-request", "prefix-cache"},
		Workloads: []WorkloadInfo{{Name: "shared-prefix", Title: "(a) Shared", Description: "d"},
			{Name: "fast-fail", Title: "(d) Fast-failing engine", Description: "d", FailingEngines: 1}},
	}
	ttfts := map[string][]float64{"random": {40, 60, 50}, "least-request": {20, 25, 30}, "prefix-cache": {12, 9, 10}}
	for i, seed := range res.Settings.Seeds {
		for _, st := range res.Strategies {
			for _, r := range res.Settings.Rates {
				res.Points = append(res.Points, point("shared-prefix", st, r, seed, ttfts[st][i]*r/10))
				// random fails 1, 3 and 2 of 10 at 10 req/s; the others none.
				failed := 0
				if st == "random" {
					failed = []int{1, 3, 2}[i] * int(r/10)
				}
				res.Points = append(res.Points, point("fast-fail", st, r, seed, 100).failing(failed))
			}
		}
		for _, w := range []string{"shared-prefix", "fast-fail"} {
			mean := []float64{5, 4, 6}[i]
			res.Bounds = append(res.Bounds, Bound{Workload: w, Rate: 10, Seed: seed, TTFT: Summary{Count: 10, Mean: mean, P99: 4 * mean}})
		}
	}
	return res
}

func TestRenderHeadline(t *testing.T) {
	md := RenderMarkdown(headlineResults(), nil)
	head, detail, ok := strings.Cut(md, "## 1. Routing quality")
	if !ok {
		t.Fatal("no routing-quality section")
	}
	settings := strings.Index(head, "## Machine and settings")
	headline := strings.Index(head, "## Headline")
	if settings < 0 || headline < settings {
		t.Fatalf("the headline must follow the machine and settings summary:\n%s", head)
	}
	// A tie of every strategy is not bold.
	if !strings.Contains(head, "| 10 | random | 20.0% | 30.0% | 2 | 100 | 1.00× | 1.00× | 400 |") {
		t.Error("a median every strategy shares must not be bold")
	}
	for _, want := range []string{
		"| Seeds | 1, 2, 3:",
		"Seeds 1, 2, 3.",
		"| rate | strategy | TTFT mean | vs LR | vs rand | p99 TTFT | vs LR | vs rand |",
		// 10/25 and 10/50 at 10 req/s; 30/75 and 30/150 at 30 req/s, from the medians.
		// Each ratio of medians is followed by the range of the per-seed ratios:
		// prefix-cache's 12, 9, 10 against least-request's 20, 25, 30 and random's 40, 60, 50.
		"| 10 | prefix-cache | **10 (9–12)** | 0.40× (0.33–0.60) | 0.20× (0.15–0.30) | **40 (36–48)** | 0.40× (0.33–0.60) | 0.20× (0.15–0.30) |",
		"| 30 | prefix-cache | **30 (27–36)** | 0.40× (0.33–0.60) | 0.20× (0.15–0.30) |",
		"| 10 | least-request | 25 (20–30) | 1.00× | 0.50× (0.42–0.60) |",
		"| 10 | random | 50 (40–60) | 2.00× (1.67–2.40) | 1.00× |",
		// The lower bound, below the strategies, never bold.
		"| 10 | _lower bound_ | 5 (4–6) | 0.20× (0.16–0.25) | 0.10× (0.07–0.12) | 20 (16–24) | 0.20× (0.16–0.25) | 0.10× (0.07–0.12) |",
		// fast-fail: failed share median and max over the seeds, and the retry budget.
		"| rate | strategy | failed % (median) | failed % (max) | max retries | TTFT mean |",
		"| 10 | random | 20.0% | 30.0% | 2 | 100 |",
		"| 30 | random | 60.0% | 90.0% | 2 | 100 |",
		"| 10 | prefix-cache | 0.0% | 0.0% | 1 | 100 |",
	} {
		if !strings.Contains(head, want) {
			t.Errorf("headline lacks %q", want)
		}
	}
	if n := strings.Count(head, "_lower bound_ |"); n != 1 {
		t.Errorf("the headline shows %d lower-bound rows, want 1: only where a bound was computed, never for failing engines", n)
	}
	// The detail tables show medians with ranges and totals over the seeds.
	for _, want := range []string{
		"| prefix-cache | 10 | 30/30 | 10 (9–12) |",
		"| random | 10 | **20.0% (max 30.0%)** | 6/30 | 100 |",
	} {
		if !strings.Contains(detail, want) {
			t.Errorf("detail tables lack %q", want)
		}
	}
}

func TestLowerBound(t *testing.T) {
	engine := enginesim.DefaultConfig()
	engine.TimeScale = 2
	system := strings.Repeat("s", 4*engine.BlockSize*100) // a hundred blocks of text
	reqs := []Request{
		{Messages: []Message{{Role: "system", Content: system}, {Role: "user", Content: "first"}}},
		{Messages: []Message{{Role: "system", Content: system}, {Role: "user", Content: "second question"}}},
		{Messages: []Message{{Role: "user", Content: "hi"}}},
	}
	got := lowerBound(reqs, engine)
	prompt := func(r Request) string {
		var turns []enginesim.Message
		for _, m := range r.Messages {
			turns = append(turns, enginesim.Message{Role: m.Role, Text: m.Content})
		}
		return enginesim.ChatPrompt(turns)
	}
	cost := func(uncached int) time.Duration { return 2 * engine.PrefillTime(uncached, 1) } // TimeScale 2
	// The first prefills all of its prompt; the second only what follows the whole blocks
	// it shares with the first; the third shares nothing.
	shared := len(enginesim.BlockHashes("<|system|>"+system+"\n", engine.BlockSize))
	want := []time.Duration{
		cost(enginesim.CountTokens(prompt(reqs[0]))),
		cost(enginesim.CountTokens(prompt(reqs[1])) - shared*engine.BlockSize),
		cost(enginesim.CountTokens(prompt(reqs[2]))),
	}
	if !slices.Equal(got, want) {
		t.Errorf("lowerBound = %v, want %v", got, want)
	}
	if got[1] >= got[0]/4 {
		t.Errorf("the second request's bound %v should be a fraction of the first's %v", got[1], got[0])
	}
}

func TestSeedRatiosPairRunsOfOneSeed(t *testing.T) {
	res := &Results{Points: []PointResult{
		point("w", "a", 10, 1, 10), point("w", "a", 10, 2, 20), point("w", "a", 10, 3, 30),
		point("w", "a", 10, 4, 40).failing(10), // nothing completed: no ratio
		point("w", "a", 30, 1, 1000),           // another rate
		// The reference in another order, without seed 2.
		point("w", "ref", 10, 4, 40), point("w", "ref", 10, 3, 15), point("w", "ref", 10, 1, 20),
	}}
	mean := func(s Summary) float64 { return s.Mean }
	// Seed 1: 10/20; seed 3: 30/15.
	if got, want := seedRatios(res, "w", "a", "ref", 10, mean), (Stat{Median: 1.25, Min: 0.5, Max: 2, N: 2}); got != want {
		t.Errorf("seedRatios = %+v, want %+v", got, want)
	}
	res.Bounds = []Bound{{Workload: "w", Rate: 10, Seed: 3, TTFT: Summary{Count: 5, Mean: 3}}, {Workload: "w", Rate: 10, Seed: 1, TTFT: Summary{Count: 5, Mean: 5}}}
	if got, want := seedRatios(res, "w", boundStrategy, "ref", 10, mean), (Stat{Median: 0.225, Min: 0.2, Max: 0.25, N: 2}); got != want {
		t.Errorf("the lower bound's seedRatios = %+v, want %+v", got, want)
	}
	if got := ratioCell(1.25, Stat{Median: 1, Min: 0.996, Max: 1.004, N: 2}); got != "1.25×" {
		t.Errorf("ratioCell shows a range that rounds to one value: %q", got)
	}
}

func TestRenderHeadlineWithoutReferences(t *testing.T) {
	without := func(drop string) *Results {
		res := headlineResults()
		res.Strategies = slices.DeleteFunc(res.Strategies, func(s string) bool { return s == drop })
		res.Points = slices.DeleteFunc(res.Points, func(p PointResult) bool { return p.Strategy == drop })
		return res
	}
	headline := func(res *Results) string {
		md := RenderMarkdown(res, nil)
		i, j := strings.Index(md, "## Headline"), strings.Index(md, "## 1. Routing quality")
		if i < 0 || j < i {
			t.Fatalf("no headline in\n%s", md)
		}
		return md[i:j]
	}

	noLR := headline(without("least-request"))
	if strings.Contains(noLR, "vs LR") || !strings.Contains(noLR, "| rate | strategy | TTFT mean | vs rand | p99 TTFT | vs rand |") {
		t.Errorf("without least-request the headline must drop its columns and keep random's:\n%s", noLR)
	}
	if !strings.Contains(noLR, "| 10 | prefix-cache | **10 (9–12)** | 0.20× (0.15–0.30) | **40 (36–48)** | 0.20× (0.15–0.30) |") {
		t.Errorf("without least-request, prefix-cache's row is wrong:\n%s", noLR)
	}
	noRand := headline(without("random"))
	if strings.Contains(noRand, "vs rand") || !strings.Contains(noRand, "| 10 | prefix-cache | **10 (9–12)** | 0.40× (0.33–0.60) | **40 (36–48)** | 0.40× (0.33–0.60) |") {
		t.Errorf("without random the headline must drop its columns:\n%s", noRand)
	}
	res := without("random")
	res.Strategies = slices.DeleteFunc(res.Strategies, func(s string) bool { return s == "least-request" })
	res.Points = slices.DeleteFunc(res.Points, func(p PointResult) bool { return p.Strategy == "least-request" })
	neither := headline(res)
	if strings.Contains(neither, "vs ") || !strings.Contains(neither, "| 10 | prefix-cache | 10 (9–12) | 40 (36–48) |") {
		t.Errorf("without either reference the headline has no ratio columns:\n%s", neither)
	}
}

func TestRerenderRecomputesAggregates(t *testing.T) {
	dir := t.TempDir()
	res := headlineResults()
	if err := WriteReport(res, dir); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "benchmarks.json"))
	if err != nil {
		t.Fatal(err)
	}
	var stored Results
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	if len(stored.Aggregates) != 2*3*2 {
		t.Fatalf("benchmarks.json has %d aggregates, want one per workload, strategy and rate", len(stored.Aggregates))
	}
	pc, ok := findAggregate(stored.Aggregates, "shared-prefix", "prefix-cache", 10)
	if !ok || pc.TTFTMean != (Stat{Median: 10, Min: 9, Max: 12, N: 3}) || len(pc.Seeds) != 3 {
		t.Errorf("stored prefix-cache aggregate = %+v", pc)
	}
	if stored.Points[0].Seed != 1 || stored.Points[len(stored.Points)-1].Seed != 3 {
		t.Error("benchmarks.json lost the points' seeds")
	}
	// Stale stored aggregates are ignored: the report comes from the points.
	for i := range stored.Aggregates {
		stored.Aggregates[i].TTFTMean.Median = 1e6
	}
	again := t.TempDir()
	if err := WriteReport(&stored, again); err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(filepath.Join(again, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != string(second) {
		t.Error("re-rendering the JSON gives a different report")
	}
	if stored.Aggregates[0].TTFTMean.Median == 1e6 {
		t.Error("WriteReport kept stale aggregates")
	}
}

func TestParseChunk(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       streamChunk
	}{
		{"role", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, streamChunk{}},
		{"content", `{"choices":[{"index":0,"delta":{"content":"tok"}}]}`, streamChunk{content: true}},
		{"finish", `{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`, streamChunk{}},
		{"usage", `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":64,"total_tokens":76}}`, streamChunk{usage: true, completionTokens: 64}},
		{"malformed", `{"choices":`, streamChunk{}},
	} {
		if got := parseChunk([]byte(c.data)); got != c.want {
			t.Errorf("%s: parseChunk = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// fakeGateway streams chat completions like engine-sim: a role chunk, tokens content
// chunks, a finishing chunk and, when the request asks for it, a usage chunk reporting
// usageTokens. It records whether each request asked for usage.
type fakeGateway struct {
	tokens, usageTokens int
	mu                  sync.Mutex
	askedUsage          []bool
}

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil || !req.Stream {
		http.Error(w, "want a streaming request", http.StatusBadRequest)
		return
	}
	usage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	g.mu.Lock()
	g.askedUsage = append(g.askedUsage, usage)
	g.mu.Unlock()
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set(endpointHeader, "bench/engine-0")
	send := func(data string) { _, _ = fmt.Fprintf(w, "data: %s\n\n", data) }
	send(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
	for range g.tokens {
		time.Sleep(time.Millisecond)
		send(`{"choices":[{"index":0,"delta":{"content":"tok "}}]}`)
	}
	send(`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`)
	if usage {
		send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d}}`, g.usageTokens))
	}
	send("[DONE]")
}

func TestRunPointIncludeUsage(t *testing.T) {
	w := Workloads()[1] // no-sharing
	for _, includeUsage := range []bool{false, true} {
		t.Run(fmt.Sprintf("include_usage=%v", includeUsage), func(t *testing.T) {
			g := &fakeGateway{tokens: 3, usageTokens: 7}
			srv := httptest.NewServer(g)
			defer srv.Close()
			// No engines: nothing to scrape, only the load generator's side is measured.
			f := &fleet{cfg: Config{IncludeUsage: includeUsage}, gatewayURL: srv.URL, http: srv.Client()}
			p, err := f.runPoint(context.Background(), w, "random", 200, 100*time.Millisecond, 5, 5000)
			if err != nil {
				t.Fatal(err)
			}
			if p.Sent == 0 || p.Completed != p.Sent || p.Failed != 0 {
				t.Fatalf("sent %d, completed %d, failed %d (%v)", p.Sent, p.Completed, p.Failed, p.Errors)
			}
			if p.Seed != 5 {
				t.Errorf("seed %d, want the run's seed 5", p.Seed)
			}
			g.mu.Lock()
			asked := slices.Clone(g.askedUsage)
			g.mu.Unlock()
			if len(asked) != p.Sent || slices.Contains(asked, !includeUsage) {
				t.Errorf("requests asked for usage: %v, want all %v", asked, includeUsage)
			}
			// The first content chunk follows a sleep; the role chunk does not count.
			if p.TTFT.Count != p.Completed || p.TTFT.Mean < 1 || p.TTFT.Mean > p.E2E.Mean {
				t.Errorf("TTFT %+v, E2E %+v", p.TTFT, p.E2E)
			}
			wantTokens, wantUsage := 3, 0
			if includeUsage {
				wantTokens, wantUsage = 7, p.Completed
			}
			if p.UsageChunks != wantUsage {
				t.Errorf("%d usage chunks, want %d", p.UsageChunks, wantUsage)
			}
			if got := p.TokenThroughput / p.Throughput; !(math.Abs(got-float64(wantTokens)) <= 1e-9) {
				t.Errorf("%.2f tokens per request, want %d", got, wantTokens)
			}
		})
	}
}

func TestRunPointRecordsEveryRequest(t *testing.T) {
	w := Workloads()[2] // hot-prefix: hot questions and unique prompts
	if w.Name != "hot-prefix" {
		t.Fatalf("workload %q, want hot-prefix", w.Name)
	}
	srv := httptest.NewServer(&fakeGateway{tokens: 3})
	defer srv.Close()
	var out bytes.Buffer
	f := &fleet{cfg: Config{Requests: &out}, gatewayURL: srv.URL, http: srv.Client()}
	p, err := f.runPoint(context.Background(), w, "prefix-cache", 200, 100*time.Millisecond, 5, 5000)
	if err != nil {
		t.Fatal(err)
	}
	schedule, reqs := pointRequests(w, "prefix-cache", 200, 100*time.Millisecond, 5000)
	var recs []RequestRecord
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	for dec.More() {
		var r RequestRecord
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if len(recs) != p.Sent || len(recs) != len(reqs) {
		t.Fatalf("%d records, want one for each of the %d requests sent", len(recs), p.Sent)
	}
	kinds := map[string]int{}
	for i, r := range recs {
		want := RequestRecord{Workload: "hot-prefix", Strategy: "prefix-cache", Rate: 200, Seed: 5, Index: i,
			SentAt: schedule[i].Seconds(), Kind: reqs[i].Kind, Endpoint: "bench/engine-0", TTFT: r.TTFT, E2E: r.E2E, OutputTokens: 3}
		if r != want {
			t.Errorf("record %d: %+v, want %+v", i, r, want)
		}
		// The first content chunk follows a sleep of a millisecond.
		if r.TTFT < 1 || r.TTFT > r.E2E {
			t.Errorf("record %d: TTFT %.3f ms, end-to-end %.3f ms", i, r.TTFT, r.E2E)
		}
		kinds[r.Kind]++
	}
	if kinds[KindHot] == 0 || kinds[KindUnique] == 0 || len(kinds) != 2 {
		t.Errorf("kinds %v, want hot questions and unique prompts", kinds)
	}
}

func TestRecordsOfFailedRequestsSayWhy(t *testing.T) {
	var out bytes.Buffer
	res := PointResult{Workload: "no-sharing", Strategy: "random", Rate: 10, Seed: 1}
	reqs := []Request{{Kind: KindUnique}, {Kind: KindUnique}}
	outcomes := []outcome{{ttft: 2 * time.Millisecond, e2e: 5 * time.Millisecond, tokens: 4, endpoint: "bench/engine-3"}, {err: "HTTP 503"}}
	if err := writeRecords(&out, res, []time.Duration{0, time.Second}, reqs, outcomes); err != nil {
		t.Fatal(err)
	}
	want := `{"workload":"no-sharing","strategy":"random","rate_rps":10,"seed":1,"index":0,"sent_at_s":0,"kind":"unique","endpoint":"bench/engine-3","ttft_ms":2,"e2e_ms":5,"output_tokens":4}
{"workload":"no-sharing","strategy":"random","rate_rps":10,"seed":1,"index":1,"sent_at_s":1,"kind":"unique","ttft_ms":0,"e2e_ms":0,"output_tokens":0,"error":"HTTP 503"}
`
	if out.String() != want {
		t.Errorf("records:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestWriteReport(t *testing.T) {
	res := &Results{
		Machine:    Machine{CPUs: 2, CPUModel: "Test CPU", GoVersion: "go1.x", OS: "linux/amd64", Date: "2026-01-01T00:00:00Z"},
		Settings:   Settings{Engines: 8, Rates: []float64{10, 30}, Duration: 6, TimeScale: 1, IncludeUsage: true, Policies: map[string]string{"random": "random", "prefix-cache": "prefix-cache"}},
		Strategies: []string{"random", "prefix-cache"},
		Workloads: []WorkloadInfo{{Name: "shared-prefix", Title: "(a) Shared", Description: "d"}, {Name: "hot-prefix", Title: "(c) Hot", Description: "d"},
			{Name: "fast-fail", Title: "(d) Fast-failing engine", Description: "d", FailingEngines: 1}},
	}
	// One seed per point, as results written before -seeds have.
	for _, w := range []string{"shared-prefix", "hot-prefix"} {
		for i, s := range res.Strategies {
			for _, r := range res.Settings.Rates {
				res.Points = append(res.Points, PointResult{Workload: w, Strategy: s, Rate: r, Sent: 10, Completed: 10,
					TTFT: Summary{Count: 10, Mean: r * float64(2-i), P99: 2 * r}, PrefixQueries: 100, PrefixHits: float64(40 * (i + 1)),
					HitRate: 0.4 * float64(i+1), Spread: NewSpread([]float64{5, 5})})
			}
		}
	}
	for i, s := range res.Strategies {
		for _, r := range res.Settings.Rates {
			failed := int(r/10) + i // random: 1 and 3 of 20; prefix-cache: 2 and 4
			res.Points = append(res.Points, PointResult{Workload: "fast-fail", Strategy: s, Rate: r, Sent: 20, Completed: 20 - failed, Failed: failed,
				TTFT: Summary{Count: 20 - failed, Mean: r, P99: 2 * r}, Spread: NewSpread([]float64{5, 5})})
		}
	}
	res.GatewayOverhead = []GoBenchmark{
		{Name: "BenchmarkGatewayOverhead/prompt=short/stream=false/direct", Metrics: map[string]float64{"p50-ms": 0.3, "p99-ms": 2, "req/s": 100}},
		{Name: "BenchmarkGatewayOverhead/prompt=short/stream=false/gateway", Metrics: map[string]float64{"p50-ms": 0.7, "p99-ms": 4, "req/s": 80}},
		{Name: "BenchmarkGatewayOverhead/first-byte/direct", Metrics: map[string]float64{"relay-p50-ms": 0.08, "relay-p99-ms": 0.2}},
		{Name: "BenchmarkGatewayOverhead/first-byte/gateway", Metrics: map[string]float64{"relay-p50-ms": 0.14, "relay-p99-ms": 0.3}},
	}
	res.Micro = []GoBenchmark{
		{Name: "BenchmarkListEndpoints/snapshot/serial", Metrics: map[string]float64{"ns/op": 100}},
		{Name: "BenchmarkListEndpoints/snapshot/parallel_churn", Metrics: map[string]float64{"ns/op": 50}},
		{Name: "BenchmarkListEndpoints/rwmutex/serial", Metrics: map[string]float64{"ns/op": 120}},
		{Name: "BenchmarkListEndpoints/rwmutex/parallel_churn", Metrics: map[string]float64{"ns/op": 300}},
		{Name: "BenchmarkRoute/random/endpoints=1000", Metrics: map[string]float64{"ns/op": 400}},
		{Name: "BenchmarkRoute/random/endpoints=1000/parallel", Metrics: map[string]float64{"ns/op": 200}},
		{Name: "BenchmarkRoute/random/endpoints=10000", Metrics: map[string]float64{"ns/op": 600}},
		{Name: "BenchmarkRoute/random/endpoints=10000/parallel", Metrics: map[string]float64{"ns/op": 400}},
	}
	dir := t.TempDir()
	if err := WriteReport(res, dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"2 × Test CPU", "go1.x", "`stream_options.include_usage`", "| Seeds | 0:",
		"| prefix-cache | 30 | 10/10 |",
		// Headline: prefix-cache's mean TTFT is half random's, their p99 equal; no
		// least-request column.
		"| 10 | prefix-cache | **10** | 0.50× | 20 | 1.00× |",
		"| 10 | random | 5.0% | 5.0% | 10 | 1.00× | 20 | 1.00× |",
		"![(a) Shared: mean TTFT vs request rate](ttft-mean-shared-prefix.png)",
		"(hit-rate.png)", "| prefix-cache | 80.0% | 80.0% |",
		"- Gateway overhead, short prompt, stream=false: +0.40 ms at p50, +2.00 ms at p99 over the engine directly.",
		"| short | false | 0.30 ms | 2.00 ms | 100 | 0.70 ms | 4.00 ms | 80 | +0.40 ms | +2.00 ms |",
		"- First streamed byte: read 0.140 ms (p50) after the engine wrote it through the gateway, 0.080 ms directly (+0.060 ms).",
		"| added by the gateway | +0.060 ms | +0.100 ms |",
		"| snapshot | 100 | 50 | 0 |",
		"| strategy | rate | **failed %** | failed/sent | TTFT mean |",
		"| random | 10 | **5.0%** | 1/20 | 10 |", "| prefix-cache | 30 | **20.0%** | 4/20 | 30 |",
		"**6.0× faster**", "| random/endpoints=1000 | 400 | 200 | 2.00× | – | 0 |",
		// At 10,000 endpoints, the serial time as a multiple of 1,000's.
		"| random/endpoints=10000 | 600 | 400 | 1.50× | 1.50× | 0 |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
	for _, f := range []string{"benchmarks.json", "ttft-mean-shared-prefix.png", "ttft-p99-hot-prefix.png", "hit-rate.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// TestPointArrivalsCountEveryWorkload checks that a point's arrivals count its workload
// by its place among all Workloads (pointArrivals takes no selection to count in), so
// that a whole run's points keep the arrivals they had when the selection was all of
// them, and that no two points share arrivals.
func TestPointArrivalsCountEveryWorkload(t *testing.T) {
	seen := map[uint64]string{}
	for wi, name := range WorkloadNames() {
		for ri := range 3 {
			got := pointArrivals(7, name, ri)
			if want := uint64(7*1000 + wi*100 + ri); got != want {
				t.Errorf("pointArrivals(7, %q, %d) = %d, want %d, as in a run of every workload", name, ri, got, want)
			}
			point := fmt.Sprintf("%s/%d", name, ri)
			if other, dup := seen[got]; dup {
				t.Errorf("points %s and %s share arrivals %d", other, point, got)
			}
			seen[got] = point
		}
	}
}
