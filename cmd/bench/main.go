// Command bench runs the routing-quality, gateway-overhead and concurrency benchmarks and
// writes docs/benchmarks.{md,json} and the plots; `make bench` runs it. See internal/bench.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/switchboard-llm/switchboard/internal/bench"
)

func main() {
	// The bench's Kubernetes client logs nothing worth reading; without a logger,
	// controller-runtime prints a warning and a stack trace into the bench's output.
	ctrllog.SetLogger(logr.Discard())
	cfg := bench.Config{Log: os.Stderr}
	var rates, strategies, workloads string
	flag.StringVar(&cfg.Root, "root", ".", "Repository root (bin/, hack/, config/).")
	flag.StringVar(&cfg.OutDir, "out", "docs", "Directory of benchmarks.md, benchmarks.json and the plots.")
	flag.StringVar(&cfg.StateDir, "state", "bin/bench-state", "Directory of the logs and of the private control plane's state.")
	flag.StringVar(&cfg.GoBin, "go", "", "The go command for the go test benchmarks (default: go from PATH).")
	flag.IntVar(&cfg.Engines, "engines", 8, "Number of engine-sim engines.")
	flag.IntVar(&cfg.EngineIPBase, "engine-ip-base", 31, "Engine i listens on 127.0.0.(base+i):8000.")
	flag.IntVar(&cfg.KVBlocks, "kv-blocks", 1024, "KV-cache blocks per engine.")
	flag.IntVar(&cfg.BlockSize, "block-size", 16, "Tokens per KV-cache block.")
	flag.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", 8, "Maximum running requests per engine.")
	flag.Float64Var(&cfg.TimeScale, "time-scale", 1, "engine-sim --time-scale (multiplier of every simulated delay).")
	flag.StringVar(&rates, "rates", "10,30,50", "Comma-separated request rates (req/s) of every workload and strategy.")
	flag.DurationVar(&cfg.Duration, "duration", 6*time.Second, "Arrival window of one load point.")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "First seed of the arrivals, the prompts and the engines' output lengths.")
	flag.IntVar(&cfg.Seeds, "seeds", 3, "Number of seeds (-seed, -seed+1, ...) every point is run with; the report shows their medians and ranges.")
	flag.BoolVar(&cfg.IncludeUsage, "include-usage", false, "Streaming requests ask for a final usage chunk (stream_options.include_usage).")
	flag.StringVar(&strategies, "strategies", "", "Comma-separated subset of strategies (default: all).")
	flag.StringVar(&workloads, "workloads", "", "Comma-separated subset of workloads: "+strings.Join(bench.WorkloadNames(), ", ")+" (default: all).")
	flag.IntVar(&cfg.APIServerPort, "apiserver-port", 16443, "Port of the private kube-apiserver (its kube-controller-manager takes the next one).")
	flag.IntVar(&cfg.EtcdPort, "etcd-port", 12379, "Client port of the private etcd (the peer port is the next one).")
	flag.BoolVar(&cfg.SkipRouting, "skip-routing", false, "Skip the routing-quality section.")
	flag.IntVar(&cfg.ProxyRounds, "proxy-rounds", 2, "Alternating rounds of the proxy section (direct, HAProxy, nginx, go-net-http, the gateway; needs wrk); 0 skips it.")
	flag.DurationVar(&cfg.ProxyDuration, "proxy-duration", 8*time.Second, "Length of one wrk run of the proxy section.")
	flag.IntVar(&cfg.ScaleEndpoints, "scale-endpoints", 10000, "Engine pods of the scale section (the gateway's heap and idle CPU); 0 skips it.")
	flag.IntVar(&cfg.ScaleRoutes, "scale-routes", 1000, "HTTPRoutes of the scale section.")
	flag.DurationVar(&cfg.ScaleWindow, "scale-window", 20*time.Second, "How long the scale section watches the idle gateway (and each window of its scraped part).")
	flag.IntVar(&cfg.ScaleScraped, "scale-scraped-engines", 1000, "engine-sim engines of the scale section's scraped part (a gateway and a metadata service scraping them); 0 skips it.")
	flag.StringVar(&cfg.GatewayPprof, "gateway-pprof", "", "Address where the gateway serves pprof, to profile a run; empty: none.")
	flag.BoolVar(&cfg.SkipGoBench, "skip-go-bench", false, "Skip the gateway-overhead and concurrency go test benchmarks.")
	flag.StringVar(&cfg.GatewayBenchtime, "gateway-benchtime", "1000x", "-benchtime of BenchmarkGatewayOverhead.")
	flag.StringVar(&cfg.MicroBenchPattern, "micro-bench", "BenchmarkListEndpoints|BenchmarkLineTransfer|BenchmarkRoute/.*/endpoints=(1000|10000)$", "-bench pattern of the concurrency micro-benchmarks.")
	flag.StringVar(&cfg.MicroBenchtime, "micro-benchtime", "200ms", "-benchtime of the concurrency micro-benchmarks.")
	flag.IntVar(&cfg.MicroCount, "micro-count", 5, "-count of the concurrency micro-benchmarks: each runs this often, and the report shows the medians and ranges.")
	requestsOut := flag.String("requests-out", "", "Also write every request of the routing section to this file, one JSON object a line (its point, arrival, kind, the pod that answered, TTFT, end-to-end time, output tokens, error).")
	render := flag.String("render", "", "Only re-render the report and plots from this benchmarks.json into -out; run nothing.")
	floorAddr := flag.String("serve-floor-proxy", "", "Only serve the proxy section's go-net-http proxy on this address, to -floor-proxy-engine; run nothing else.")
	floorEngine := flag.String("floor-proxy-engine", "", "The engine (host:port) of -serve-floor-proxy.")
	flag.Parse()

	if *floorAddr != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := bench.ServeFloorProxy(ctx, *floorAddr, *floorEngine); err != nil {
			stop()
			fail(err)
		}
		return
	}

	if cfg.Seeds < 1 {
		fail(fmt.Errorf("-seeds: %d, want at least 1", cfg.Seeds))
	}
	var err error
	if cfg.Rates, err = parseRates(rates); err != nil {
		fail(err)
	}
	cfg.Strategies, cfg.Workloads = list(strategies), list(workloads)
	if cfg.Root, err = filepath.Abs(cfg.Root); err != nil {
		fail(err)
	}
	cfg.OutDir, cfg.StateDir = under(cfg.Root, cfg.OutDir), under(cfg.Root, cfg.StateDir)
	if cfg.GoBin == "" {
		if cfg.GoBin, err = exec.LookPath("go"); err != nil {
			cfg.GoBin = "/usr/local/go/bin/go"
		}
	}

	if *render != "" {
		if err := rerender(*render, cfg.OutDir); err != nil {
			fail(err)
		}
		return
	}

	if *requestsOut != "" {
		// Each load point writes its requests in one write, so that a run cut short
		// leaves the points it finished.
		f, err := os.Create(*requestsOut)
		if err != nil {
			fail(err)
		}
		defer func() { _ = f.Close() }()
		cfg.Requests = f
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	if _, err := bench.Run(ctx, cfg); err != nil {
		stop()
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "[bench] done in %s: %s\n", time.Since(start).Round(time.Second), filepath.Join(cfg.OutDir, "benchmarks.md"))
}

// rerender rewrites the report of the results in jsonPath into outDir.
func rerender(jsonPath, outDir string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var res bench.Results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("read %s: %w", jsonPath, err)
	}
	return bench.WriteReport(&res, outDir)
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range list(s) {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-rates: %q is not a positive number", f)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-rates: no rate given")
	}
	return out, nil
}

func list(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func under(root, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "[bench] ERROR: %v\n", err)
	os.Exit(1)
}
