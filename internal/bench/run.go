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

	Rates      []float64
	Duration   time.Duration
	Seed       uint64
	Strategies []string // subset of the policies; empty means all
	Workloads  []string // subset of the workloads; empty means all

	APIServerPort int
	EtcdPort      int

	SkipGoBench       bool
	GatewayBenchtime  string
	MicroBenchPattern string
	MicroBenchtime    string
	Log               io.Writer
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		_, _ = fmt.Fprintf(c.Log, "[bench] "+format+"\n", args...)
	}
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
	Engines          int               `json:"engines"`
	KVBlocks         int               `json:"kv_blocks"`
	BlockSize        int               `json:"block_size"`
	MaxNumSeqs       int               `json:"max_num_seqs"`
	TimeScale        float64           `json:"time_scale"`
	Rates            []float64         `json:"rates_rps"`
	Duration         float64           `json:"duration_s"`
	Seed             uint64            `json:"seed"`
	Policies         map[string]string `json:"policies"`
	Elapsed          float64           `json:"routing_elapsed_s"`
	GatewayBenchtime string            `json:"gateway_benchtime"`
	MicroBench       string            `json:"micro_bench"`
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
	Machine         Machine        `json:"machine"`
	Settings        Settings       `json:"settings"`
	Strategies      []string       `json:"strategies"`
	Workloads       []WorkloadInfo `json:"workloads"`
	Points          []PointResult  `json:"points"`
	GatewayOverhead []GoBenchmark  `json:"gateway_overhead,omitempty"`
	Micro           []GoBenchmark  `json:"micro,omitempty"`
}

// Run measures everything and writes the report into cfg.OutDir. Every process it starts
// is stopped before it returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Results, error) {
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
		Policies: map[string]string{}, GatewayBenchtime: cfg.GatewayBenchtime,
		MicroBench: fmt.Sprintf("-bench '%s' -benchtime %s", cfg.MicroBenchPattern, cfg.MicroBenchtime),
	}
	for _, p := range pols {
		if len(cfg.Strategies) == 0 || slices.Contains(cfg.Strategies, p.Name) {
			res.Strategies = append(res.Strategies, p.Name)
			res.Settings.Policies[p.Name] = policySummary(p)
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
	if err := runRouting(ctx, cfg, res, workloads); err != nil {
		return nil, err
	}
	res.Settings.Elapsed = time.Since(started).Seconds()
	cfg.logf("routing quality measured in %s", time.Since(started).Round(time.Second))

	// A failing go test benchmark does not lose the routing results: the report is written
	// with what was measured and the error returned after.
	var benchErr error
	if !cfg.SkipGoBench {
		cfg.logf("gateway overhead: go test -bench BenchmarkGatewayOverhead -benchtime %s ./internal/gateway/", cfg.GatewayBenchtime)
		var err error
		if res.GatewayOverhead, err = runGoBench(ctx, cfg, "bench-gateway", "./internal/gateway/", "BenchmarkGatewayOverhead", cfg.GatewayBenchtime); err != nil {
			benchErr = errors.Join(benchErr, err)
		}
		cfg.logf("concurrency: go test -bench '%s' -benchtime %s ./internal/cache/ ./internal/routing/strategies/", cfg.MicroBenchPattern, cfg.MicroBenchtime)
		for _, pkg := range []string{"./internal/cache/", "./internal/routing/strategies/"} {
			if ctx.Err() != nil {
				break
			}
			name := "bench-" + filepath.Base(filepath.Clean(pkg))
			r, err := runGoBench(ctx, cfg, name, pkg, cfg.MicroBenchPattern, cfg.MicroBenchtime)
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
	f := &fleet{cfg: cfg}
	defer f.down()
	if err := f.up(ctx); err != nil {
		return err
	}
	total := len(workloads) * len(res.Strategies) * len(cfg.Rates)
	n := 0
	for wi, w := range workloads {
		for _, strategy := range res.Strategies {
			// Fresh engines for every strategy: no strategy profits from another's warm cache.
			if err := f.restartEngines(ctx); err != nil {
				return err
			}
			err := f.withFailingEngines(ctx, w.FailingEngines, func() error {
				for ri, rate := range cfg.Rates {
					n++
					seed := cfg.Seed*1000 + uint64(wi*100+ri)
					p, err := f.runPoint(ctx, w, strategy, rate, cfg.Duration, seed)
					if err != nil {
						return fmt.Errorf("%s/%s at %g req/s: %w", w.Name, strategy, rate, err)
					}
					res.Points = append(res.Points, p)
					cfg.logf("[%d/%d] %-13s %-14s %5.1f req/s: ttft mean %7.1f ms p99 %7.1f ms, e2e mean %7.1f ms, %5.1f req/s done, hit %5.1f%%, spread cv %.2f, failed %d (%.1f%%)",
						n, total, w.Name, strategy, rate, p.TTFT.Mean, p.TTFT.P99, p.E2E.Mean, p.Throughput, 100*p.HitRate, p.Spread.CV, p.Failed, 100*p.FailedShare())
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteReport writes benchmarks.json, benchmarks.md and the plots into dir.
func WriteReport(res *Results, dir string) error {
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
