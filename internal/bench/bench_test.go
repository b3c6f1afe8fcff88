package bench

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
		if got := Percentile(sorted, c.q); math.Abs(got-c.want) > 1e-9 {
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
	if s.Count != 100 || s.Mean != 50.5 || s.P50 != 50.5 || s.Max != 100 || math.Abs(s.P99-99.01) > 1e-9 {
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
	if s := NewSpread([]float64{8, 0, 0, 0}); math.Abs(s.CV-math.Sqrt(3)) > 1e-9 || s.MaxOverMean != 4 {
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

func TestWriteReport(t *testing.T) {
	res := &Results{
		Machine:    Machine{CPUs: 2, CPUModel: "Test CPU", GoVersion: "go1.x", OS: "linux/amd64", Date: "2026-01-01T00:00:00Z"},
		Settings:   Settings{Engines: 8, Rates: []float64{10, 30}, Duration: 6, TimeScale: 1, Policies: map[string]string{"random": "random", "prefix-cache": "prefix-cache"}},
		Strategies: []string{"random", "prefix-cache"},
		Workloads: []WorkloadInfo{{Name: "shared-prefix", Title: "(a) Shared", Description: "d"}, {Name: "hot-prefix", Title: "(c) Hot", Description: "d"},
			{Name: "fast-fail", Title: "(d) Fast-failing engine", Description: "d", FailingEngines: 1}},
	}
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
	}
	res.Micro = []GoBenchmark{
		{Name: "BenchmarkListEndpoints/snapshot/serial", Metrics: map[string]float64{"ns/op": 100}},
		{Name: "BenchmarkListEndpoints/snapshot/parallel_churn", Metrics: map[string]float64{"ns/op": 50}},
		{Name: "BenchmarkListEndpoints/rwmutex/serial", Metrics: map[string]float64{"ns/op": 120}},
		{Name: "BenchmarkListEndpoints/rwmutex/parallel_churn", Metrics: map[string]float64{"ns/op": 300}},
		{Name: "BenchmarkRoute/random/endpoints=1000", Metrics: map[string]float64{"ns/op": 400}},
		{Name: "BenchmarkRoute/random/endpoints=1000/parallel", Metrics: map[string]float64{"ns/op": 200}},
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
		"2 × Test CPU", "go1.x",
		"| prefix-cache | 30 | 10/10 |",
		"mean TTFT prefix-cache **10 ms** vs random **20 ms** (2.0× lower)",
		"![(a) Shared: mean TTFT vs request rate](ttft-mean-shared-prefix.png)",
		"(hit-rate.png)", "| prefix-cache | 80.0% | 80.0% |",
		"| short | false | 0.30 ms | 2.00 ms | 100 | 0.70 ms | 4.00 ms | 80 | +0.40 ms | +2.00 ms |",
		"| snapshot | 100 | 50 | 0 |",
		"| strategy | rate | **failed %** | failed/sent | TTFT mean |",
		"| random | 10 | **5.0%** | 1/20 | 10 |", "| prefix-cache | 30 | **20.0%** | 4/20 | 30 |",
		"- (d) Fast-failing engine at 10 req/s, engine 0 failing every request: failed share random **5.0%** (1/20), prefix-cache **10.0%** (2/20).",
		"- (d) Fast-failing engine at 30 req/s, engine 0 failing every request: failed share random **15.0%** (3/20), prefix-cache **20.0%** (4/20).", "**6.0× faster**", "| random/endpoints=1000 | 400 | 200 | 2.00× |",
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
