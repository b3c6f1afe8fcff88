package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

// Config are the benchmark's settings; cmd/bench fills them from flags.
type Config struct {
	Root     string // repository root (bin/, hack/)
	OutDir   string // where benchmarks.json, benchmarks.md and the plots go
	StateDir string // logs and the private control plane's state
	GoBin    string // the go command, for the go test benchmarks

	Engines      int
	EngineIPBase int // engine i listens on 127.0.0.(EngineIPBase+i):8000
	KVBlocks     int
	BlockSize    int
	MaxNumSeqs   int
	TimeScale    float64

	Rates    []float64
	Duration time.Duration
	// Seed is the first seed; every point is run with the Seeds seeds Seed, Seed+1, ...
	Seed  uint64
	Seeds int
	// IncludeUsage makes every streaming request ask for a final usage chunk
	// (stream_options.include_usage).
	IncludeUsage bool
	Strategies   []string // subset of the policies; empty means all
	Workloads    []string // subset of the workloads; empty means all

	APIServerPort int
	EtcdPort      int

	// SkipRouting leaves out the routing-quality section.
	SkipRouting bool
	// ProxyRounds is how many alternating rounds the proxy section runs; 0 leaves it out.
	ProxyRounds int
	// ProxyDuration is the length of one wrk run of the proxy section.
	ProxyDuration time.Duration
	// ScaleEndpoints and ScaleRoutes size the scale section; 0 endpoints leaves it out.
	ScaleEndpoints, ScaleRoutes int
	// ScaleWindow is how long the scale section watches the idle gateway, and how long
	// each window of its scraped part lasts.
	ScaleWindow time.Duration
	// ScaleScraped is how many engines the scale section's scraped part runs; 0 leaves
	// it out.
	ScaleScraped int
	// GatewayPprof, when set, is the address where the gateway serves pprof, to profile
	// a run.
	GatewayPprof string

	SkipGoBench       bool
	GatewayBenchtime  string
	MicroBenchPattern string
	MicroBenchtime    string
	// MicroCount is how many times each concurrency micro-benchmark runs (at least once);
	// the report shows the medians.
	MicroCount int
	Log        io.Writer
	// Requests, when set, receives every request of the routing section as one JSON line
	// (RequestRecord), for analyses the report does not make, such as which requests make
	// a tail.
	Requests io.Writer
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		_, _ = fmt.Fprintf(c.Log, "[bench] "+format+"\n", args...)
	}
}

// engineModel is the configuration of the benchmark's engines: engine-sim's defaults with
// the flags the fleet starts every engine with.
func (c Config) engineModel() enginesim.Config {
	m := enginesim.DefaultConfig()
	m.KVBlocks, m.BlockSize, m.MaxNumSeqs, m.TimeScale = c.KVBlocks, c.BlockSize, c.MaxNumSeqs, c.TimeScale
	return m
}

// Machine records where the results were measured.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Date      string `json:"date"`
}

// Settings records how the results were measured.
type Settings struct {
	Engines    int       `json:"engines"`
	KVBlocks   int       `json:"kv_blocks"`
	BlockSize  int       `json:"block_size"`
	MaxNumSeqs int       `json:"max_num_seqs"`
	TimeScale  float64   `json:"time_scale"`
	Rates      []float64 `json:"rates_rps"`
	Duration   float64   `json:"duration_s"`
	Seed       uint64    `json:"seed"`
	// Seeds are the seeds every point was run with.
	Seeds []uint64 `json:"seeds,omitempty"`
	// IncludeUsage is whether the streaming requests asked for a final usage chunk.
	IncludeUsage bool              `json:"include_usage"`
	Policies     map[string]string `json:"policies"`
	// RetryAttempts is how many further endpoints the gateway may try per request, by
	// strategy: the policy's spec.retry.attempts or the gateway's default.
	RetryAttempts    map[string]int `json:"retry_attempts,omitempty"`
	Elapsed          float64        `json:"routing_elapsed_s"`
	GatewayBenchtime string         `json:"gateway_benchtime"`
	MicroBench       string         `json:"micro_bench"`
}

// WorkloadInfo describes a workload in the results.
type WorkloadInfo struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	Description string `json:"description"`
	// FailingEngines is [Workload.FailingEngines].
	FailingEngines int `json:"failing_engines,omitempty"`
}

// Results is everything one run measured; benchmarks.json holds it.
type Results struct {
	Machine    Machine        `json:"machine"`
	Settings   Settings       `json:"settings"`
	Strategies []string       `json:"strategies"`
	Workloads  []WorkloadInfo `json:"workloads"`
	// Points are the per-seed load points, in run order.
	Points []PointResult `json:"points"`
	// Bounds are the per-seed lower bounds of the load points' TTFT (lowerBound).
	Bounds []Bound `json:"bounds,omitempty"`
	// Aggregates summarise Points per workload, strategy and rate over the seeds;
	// WriteReport computes them from Points.
	Aggregates      []Aggregate   `json:"aggregates,omitempty"`
	Proxy           []ProxyResult `json:"proxy,omitempty"`
	ProxySettings   ProxySettings `json:"proxy_settings"`
	Scale           *ScaleResult  `json:"scale,omitempty"`
	GatewayOverhead []GoBenchmark `json:"gateway_overhead,omitempty"`
	Micro           []GoBenchmark `json:"micro,omitempty"`
}

// Run measures everything and writes the report into cfg.OutDir. Every process it starts
// is stopped before it returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	cfg.MicroCount = max(cfg.MicroCount, 1)
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	res := &Results{Machine: machine()}
	pols := policies()
	res.Settings = Settings{
		Engines: cfg.Engines, KVBlocks: cfg.KVBlocks, BlockSize: cfg.BlockSize, MaxNumSeqs: cfg.MaxNumSeqs,
		TimeScale: cfg.TimeScale, Rates: cfg.Rates, Duration: cfg.Duration.Seconds(), Seed: cfg.Seed,
		Seeds: runSeeds(cfg.Seed, cfg.Seeds), IncludeUsage: cfg.IncludeUsage,
		Policies: map[string]string{}, RetryAttempts: map[string]int{}, GatewayBenchtime: cfg.GatewayBenchtime,
		MicroBench: fmt.Sprintf("-bench '%s' -benchtime %s -count %d", cfg.MicroBenchPattern, cfg.MicroBenchtime, cfg.MicroCount),
	}
	for _, p := range pols {
		if len(cfg.Strategies) == 0 || slices.Contains(cfg.Strategies, p.Name) {
			res.Strategies = append(res.Strategies, p.Name)
			res.Settings.Policies[p.Name] = policySummary(p)
			res.Settings.RetryAttempts[p.Name] = retryAttempts(p)
		}
	}
	var workloads []Workload
	for _, w := range Workloads() {
		if len(cfg.Workloads) == 0 || slices.Contains(cfg.Workloads, w.Name) {
			workloads = append(workloads, w)
			res.Workloads = append(res.Workloads, WorkloadInfo{w.Name, w.Title, w.Description, w.FailingEngines})
		}
	}

	started := time.Now()
	if !cfg.SkipRouting {
		if err := runRouting(ctx, cfg, res, workloads); err != nil {
			return nil, err
		}
		res.Settings.Elapsed = time.Since(started).Seconds()
		cfg.logf("routing quality measured in %s", time.Since(started).Round(time.Second))
	}
	if cfg.ProxyRounds > 0 {
		started = time.Now()
		var err error
		if res.Proxy, res.ProxySettings, err = runProxy(ctx, cfg); err != nil {
			return nil, fmt.Errorf("proxy section: %w", err)
		}
		cfg.logf("proxy cost measured in %s", time.Since(started).Round(time.Second))
	}
	if cfg.ScaleEndpoints > 0 {
		started = time.Now()
		var err error
		if res.Scale, err = runScale(ctx, cfg); err != nil {
			return nil, fmt.Errorf("scale section: %w", err)
		}
		cfg.logf("scale measured in %s", time.Since(started).Round(time.Second))
	}

	// A failing go test benchmark does not lose the routing results: the report is written
	// with what was measured and the error returned after.
	var benchErr error
	if !cfg.SkipGoBench {
		cfg.logf("gateway overhead: go test -bench BenchmarkGatewayOverhead -benchtime %s ./internal/gateway/", cfg.GatewayBenchtime)
		var err error
		if res.GatewayOverhead, err = runGoBench(ctx, cfg, "bench-gateway", "./internal/gateway/", "BenchmarkGatewayOverhead", cfg.GatewayBenchtime, 1); err != nil {
			benchErr = errors.Join(benchErr, err)
		}
		cfg.logf("concurrency: go test -bench '%s' -benchtime %s -count %d ./internal/cache/ ./internal/routing/strategies/", cfg.MicroBenchPattern, cfg.MicroBenchtime, cfg.MicroCount)
		for _, pkg := range []string{"./internal/cache/", "./internal/routing/strategies/"} {
			if ctx.Err() != nil {
				break
			}
			name := "bench-" + filepath.Base(filepath.Clean(pkg))
			r, err := runGoBench(ctx, cfg, name, pkg, cfg.MicroBenchPattern, cfg.MicroBenchtime, cfg.MicroCount)
			benchErr = errors.Join(benchErr, err)
			res.Micro = append(res.Micro, r...)
		}
	}
	if err := WriteReport(res, cfg.OutDir); err != nil {
		return nil, errors.Join(benchErr, err)
	}
	return res, benchErr
}

func runRouting(ctx context.Context, cfg Config, res *Results, workloads []Workload) (err error) {
	f := newFleet(cfg)
	defer f.down()
	if err := f.up(ctx); err != nil {
		return err
	}
	seeds := res.Settings.Seeds
	engine := cfg.engineModel()
	total := len(workloads) * len(seeds) * len(res.Strategies) * len(cfg.Rates)
	n := 0
	for _, w := range workloads {
		// The strategies take turns within each seed, so that a slow drift of the machine
		// spreads over all of them rather than favouring whichever ran its seeds first.
		for _, seed := range seeds {
			for ri, rate := range cfg.Rates {
				_, reqs := pointRequests(w, boundStrategy, rate, cfg.Duration, pointArrivals(seed, w.Name, ri))
				res.Bounds = append(res.Bounds, Bound{Workload: w.Name, Rate: rate, Seed: seed,
					TTFT: Summarize(lowerBound(reqs, engine))})
			}
			for _, strategy := range res.Strategies {
				// Fresh engines and gateway for every strategy and seed: no run profits from
				// another's warm cache or suffers from what it taught the gateway.
				if err := f.restart(ctx, seed); err != nil {
					return err
				}
				err := f.withFailingEngines(ctx, w.FailingEngines, func() error {
					for ri, rate := range cfg.Rates {
						n++
						p, err := f.runPoint(ctx, w, strategy, rate, cfg.Duration, seed, pointArrivals(seed, w.Name, ri))
						if err != nil {
							return fmt.Errorf("%s/%s at %g req/s, seed %d: %w", w.Name, strategy, rate, seed, err)
						}
						res.Points = append(res.Points, p)
						cfg.logf("[%d/%d] %-13s %-14s %5.1f req/s seed %d: ttft mean %7.1f ms p99 %7.1f ms, e2e mean %7.1f ms, %5.1f req/s done, hit %5.1f%%, spread cv %.2f, failed %d (%.1f%%)",
							n, total, w.Name, strategy, rate, seed, p.TTFT.Mean, p.TTFT.P99, p.E2E.Mean, p.Throughput, 100*p.HitRate, p.Spread.CV, p.Failed, 100*p.FailedShare())
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// pointArrivals is the seed of the arrivals and request shapes of the load point at the
// rate-th rate of the named workload under the run's seed: the same for every strategy of
// that seed, and, as the workload counts by its place among all Workloads, the same
// whichever of them a run selects, so that a run of one workload at `make bench`'s rates
// repeats its points of a whole `make bench`.
func pointArrivals(seed uint64, workload string, rate int) uint64 {
	return seed*1000 + uint64(slices.Index(WorkloadNames(), workload)*100+rate)
}

// runSeeds returns the n seeds base, base+1, ...; at least base.
func runSeeds(base uint64, n int) []uint64 {
	seeds := []uint64{base}
	for i := 1; i < n; i++ {
		seeds = append(seeds, base+uint64(i))
	}
	return seeds
}

// WriteReport computes res.Aggregates from res.Points, replacing any stored ones, and
// writes benchmarks.json, benchmarks.md and the plots into dir.
func WriteReport(res *Results, dir string) error {
	res.Aggregates = Aggregates(res)
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "benchmarks.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	plots, err := writePlots(res, dir)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(RenderMarkdown(res, plots)), 0o644)
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Date: time.Now().UTC().Format(time.RFC3339)}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}
