package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// GoBenchmark is one result line of `go test -bench`.
type GoBenchmark struct {
	// Name is the benchmark name without the GOMAXPROCS suffix.
	Name       string `json:"name"`
	Iterations int64  `json:"iterations"`
	// Metrics maps a unit ("ns/op", "p50-ms", "req/s", ...) to its value: the median over
	// the runs when the benchmark ran more than once (MergeRuns).
	Metrics map[string]float64 `json:"metrics"`
	// Runs maps each unit to its median and range over the runs (go test -count); nil for
	// a single run.
	Runs map[string]Stat `json:"runs,omitempty"`
}

// MergeRuns merges the results of each benchmark that ran more than once (go test
// -count) into one, in the order the benchmarks first appear: its metrics become the
// medians over the runs, Runs their ranges, and Iterations the runs' sum. A benchmark
// that ran once is kept as it is.
func MergeRuns(bs []GoBenchmark) []GoBenchmark {
	runs := map[string][]GoBenchmark{}
	var names []string
	for _, b := range bs {
		if _, ok := runs[b.Name]; !ok {
			names = append(names, b.Name)
		}
		runs[b.Name] = append(runs[b.Name], b)
	}
	out := make([]GoBenchmark, 0, len(names))
	for _, name := range names {
		rs := runs[name]
		if len(rs) == 1 {
			out = append(out, rs[0])
			continue
		}
		merged := GoBenchmark{Name: name, Metrics: map[string]float64{}, Runs: map[string]Stat{}}
		values := map[string][]float64{}
		for _, r := range rs {
			merged.Iterations += r.Iterations
			for unit, v := range r.Metrics {
				values[unit] = append(values[unit], v)
			}
		}
		for unit, vs := range values {
			s := NewStat(vs)
			merged.Metrics[unit], merged.Runs[unit] = s.Median, s
		}
		out = append(out, merged)
	}
	return out
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// ParseGoBench reads the result lines of `go test -bench` output; other lines are ignored.
func ParseGoBench(r io.Reader) ([]GoBenchmark, error) {
	var out []GoBenchmark
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") || len(fields)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		b := GoBenchmark{Name: procsSuffix.ReplaceAllString(fields[0], ""), Iterations: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark %s: value %q: %w", fields[0], fields[i], err)
			}
			b.Metrics[fields[i+1]] = v
		}
		out = append(out, b)
	}
	return out, sc.Err()
}

// runGoBench runs `go test -bench pattern -benchtime benchtime -count count pkg` (count at
// least 1) in the repository with the local Kubernetes binaries as KUBEBUILDER_ASSETS and
// returns its results, each benchmark's runs merged (MergeRuns).
func runGoBench(ctx context.Context, cfg Config, logName, pkg, pattern, benchtime string, count int) ([]GoBenchmark, error) {
	logPath := filepath.Join(cfg.StateDir, logName+".log")
	_ = os.Remove(logPath)
	p, err := startProcessIn(cfg.Root, logName, logPath, []string{"KUBEBUILDER_ASSETS=" + filepath.Join(cfg.Root, "bin", "k8s")},
		cfg.GoBin, "test", "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-count", strconv.Itoa(count), pkg)
	if err != nil {
		return nil, err
	}
	if err := p.wait(ctx); err != nil {
		return nil, fmt.Errorf("go test -bench %s %s (log: %s): %w", pattern, pkg, logPath, err)
	}
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	res, err := ParseGoBench(f)
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("go test -bench %s %s printed no results (log: %s)", pattern, pkg, logPath)
	}
	return MergeRuns(res), nil
}
