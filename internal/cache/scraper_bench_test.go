//go:build unix

package cache

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

// benchFleetEnv, set to "n/body", makes TestScrapeBenchFleet serve n engines answering
// /metrics with the body named (see benchBodies).
const benchFleetEnv = "SWITCHBOARD_SCRAPE_BENCH_FLEET"

// benchBodies are the /metrics bodies BenchmarkScraper's engines serve: "sim" is an idle
// engine-sim's (16 KB, as cmd/engine-sim serves it); "small" is a 1 KB vLLM body
// (testdata/vllm_legacy.txt), cheap to parse, so that the rest of a scrape's cost shows.
var benchBodies = []string{"sim", "small"}

// BenchmarkScraper runs a Scraper with the default options over a fleet of engines on
// loopback addresses, served by a child process so that the CPU time reported is the
// scraper's. One op is one scrape interval; run it for a few seconds, e.g.
// -benchtime 5s. It reports the metrics age (now minus ScrapedAt) sampled across every
// engine four times an interval, scrapes and failures per second, the connections the
// engines accepted while measured, the CPU cores the scraper's process used, and that
// CPU time and the heap allocations divided by the scrapes (listings included in both).
func BenchmarkScraper(b *testing.B) {
	for _, body := range benchBodies {
		for _, n := range []int{200, 1000} {
			b.Run(fmt.Sprintf("body=%s/engines=%d", body, n), func(b *testing.B) { benchmarkScraper(b, n, body) })
		}
	}
}

func benchmarkScraper(b *testing.B, n int, body string) {
	fleet := startBenchFleet(b, n, body)
	c := New()
	for i, addr := range fleet.addrs {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			b.Fatal(err)
		}
		p, err := strconv.ParseInt(port, 10, 32)
		if err != nil {
			b.Fatal(err)
		}
		c.UpsertPod(makePod("engine-" + strconv.Itoa(i)).IP(host).Port(int32(p)).Build())
	}
	s := NewScraper(c, ScrapeOptions{})
	started := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Start(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			b.Errorf("Start returned %v", err)
		}
	})

	// Warm up: every engine scraped (or ten seconds gone), then one more second for the
	// schedule to settle. An engine never scraped counts as scraped when the Scraper
	// started.
	pods := c.ListPods()
	age := func(p *Pod, now time.Time) time.Duration {
		if m := p.Metrics(); m != nil {
			return now.Sub(m.ScrapedAt)
		}
		return now.Sub(started)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !slices.ContainsFunc(pods, func(p *Pod) bool { return p.Metrics() == nil }) {
			break
		}
	}
	time.Sleep(time.Second)

	interval := s.opts.Interval
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	mallocs := mem.Mallocs
	conns, stats, cpu, start := fleet.accepted(b), s.Stats(), cpuTime(b), time.Now()
	var ages []time.Duration
	for b.Loop() {
		for range 4 {
			time.Sleep(interval / 4)
			now := time.Now()
			for _, p := range pods {
				ages = append(ages, age(p, now))
			}
		}
	}
	elapsed := time.Since(start).Seconds()
	cpuUsed := (cpuTime(b) - cpu).Seconds()
	newConns := fleet.accepted(b) - conns
	after := s.Stats()
	runtime.ReadMemStats(&mem)
	scrapes := float64(after.Succeeded + after.Failed - stats.Succeeded - stats.Failed)

	slices.Sort(ages)
	quantile := func(q float64) float64 { return ages[int(q*float64(len(ages)-1))].Seconds() * 1000 }
	b.ReportMetric(quantile(0.5), "p50-age-ms")
	b.ReportMetric(quantile(0.99), "p99-age-ms")
	b.ReportMetric(quantile(1), "max-age-ms")
	b.ReportMetric(float64(after.Succeeded-stats.Succeeded)/elapsed, "scrapes/s")
	b.ReportMetric(float64(after.Failed-stats.Failed)/elapsed, "failed/s")
	b.ReportMetric(float64(newConns), "new-conns")
	b.ReportMetric(cpuUsed/elapsed, "cpu-cores")
	b.ReportMetric(cpuUsed*1e6/scrapes, "cpu-us/scrape")
	b.ReportMetric(float64(mem.Mallocs-mallocs)/scrapes, "allocs/scrape")
}

// BenchmarkExchange is the floor under BenchmarkScraper's CPU per scrape: bare
// keep-alive exchanges with the same fleet (write the scrape's request, read the answer
// to its end, parse and store nothing), each engine once an interval, in phaseSlots
// batches an interval as the Scraper sends them, each exchange in a goroutine of its
// own. One op is one interval.
func BenchmarkExchange(b *testing.B) {
	const n = 1000
	for _, body := range benchBodies {
		b.Run(fmt.Sprintf("body=%s/engines=%d", body, n), func(b *testing.B) {
			benchmarkExchange(b, startBenchFleet(b, n, body))
		})
	}
}

func benchmarkExchange(b *testing.B, fleet *benchFleet) {
	type engine struct {
		conn    net.Conn
		answers *bufio.Reader
		request []byte
	}
	engines := make([]engine, len(fleet.addrs))
	for i, addr := range fleet.addrs {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		engines[i] = engine{conn, bufio.NewReaderSize(conn, answerBufferSize), newEngineConn(addr).metricsRequest}
	}
	var failed atomic.Int64
	exchange := func(e *engine) {
		if _, err := e.conn.Write(e.request); err != nil {
			failed.Add(1)
			return
		}
		resp, err := http.ReadResponse(e.answers, nil)
		if err != nil {
			failed.Add(1)
			return
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
			failed.Add(1)
		}
	}
	batch := len(engines) / phaseSlots
	gap := DefaultScrapeInterval / phaseSlots
	exchanges, cpu, next := 0, cpuTime(b), time.Now()
	for b.Loop() {
		for first := 0; first < len(engines); first += batch {
			var wg sync.WaitGroup
			for i := first; i < min(first+batch, len(engines)); i++ {
				wg.Go(func() { exchange(&engines[i]) })
			}
			wg.Wait()
			next = next.Add(gap)
			time.Sleep(time.Until(next))
		}
		exchanges += len(engines)
	}
	if failed.Load() > 0 {
		b.Fatalf("%d of %d exchanges failed", failed.Load(), exchanges)
	}
	b.ReportMetric((cpuTime(b)-cpu).Seconds()*1e6/float64(exchanges), "cpu-us/exchange")
}

// cpuTime returns the user and system CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchFleet is a child process serving engines for BenchmarkScraper.
type benchFleet struct {
	addrs []string
	// ask and answers carry the child's protocol: each line written to ask is answered
	// with the number of connections the engines have accepted so far.
	ask     io.Writer
	answers *bufio.Scanner
}

// startBenchFleet starts this test binary as TestScrapeBenchFleet serving n engines with
// the /metrics body named. The child stops when the benchmark ends (it reads EOF), or at
// the latest after ten minutes.
func startBenchFleet(b *testing.B, n int, body string) *benchFleet {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestScrapeBenchFleet$")
	cmd.Env = append(os.Environ(), benchFleetEnv+"="+strconv.Itoa(n)+"/"+body)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("engine fleet: %v", err)
		}
		cancel()
	})
	f := &benchFleet{ask: stdin, answers: bufio.NewScanner(stdout)}
	for len(f.addrs) < n && f.answers.Scan() {
		f.addrs = append(f.addrs, f.answers.Text())
	}
	if len(f.addrs) < n {
		b.Fatalf("engine fleet started %d of %d engines", len(f.addrs), n)
	}
	return f
}

// accepted returns the number of connections the fleet's engines have accepted.
func (f *benchFleet) accepted(b *testing.B) int {
	if _, err := io.WriteString(f.ask, "accepted?\n"); err != nil {
		b.Fatal(err)
	}
	if !f.answers.Scan() {
		b.Fatalf("engine fleet did not answer: %v", f.answers.Err())
	}
	n, err := strconv.Atoi(f.answers.Text())
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// TestScrapeBenchFleet is not a test but the engine fleet of BenchmarkScraper, run in a
// child process; it skips unless benchFleetEnv is set. It listens on n loopback
// addresses (127.0.1.1, 127.0.1.2, …), writes each address on a line of stdout and
// serves, on every one, a fixed /metrics body (gzipped when asked, as engine-sim does)
// and an idle engine-sim's /v1/models. Each line read from stdin is answered with the
// number of connections accepted; at EOF it stops.
func TestScrapeBenchFleet(t *testing.T) {
	fleet, body, _ := strings.Cut(os.Getenv(benchFleetEnv), "/")
	if fleet == "" {
		t.Skip("the engine fleet of BenchmarkScraper; set " + benchFleetEnv + " to run it")
	}
	n, err := strconv.Atoi(fleet)
	if err != nil || n <= 0 || n > 250*250 {
		t.Fatalf("%s=%q: want 1 to %d engines", benchFleetEnv, fleet, 250*250)
	}
	engine, err := enginesim.NewEngine(enginesim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	render := func(path string) []byte {
		rec := httptest.NewRecorder()
		engine.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Body.Bytes()
	}
	metrics, models := render("/metrics"), render("/v1/models")
	if body == "small" {
		if metrics, err = os.ReadFile(filepath.Join("testdata", "vllm_legacy.txt")); err != nil {
			t.Fatal(err)
		}
	}
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	if _, err := zw.Write(metrics); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(zipped.Bytes())
			return
		}
		_, _ = w.Write(metrics)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(models)
	})
	var accepted atomic.Int64
	srv := &http.Server{Handler: mux, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}}
	var serving sync.WaitGroup
	t.Cleanup(func() {
		_ = srv.Close()
		serving.Wait()
	})
	for i := range n {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.%d.%d:0", 1+i/250, 1+i%250))
		if err != nil {
			t.Fatal(err)
		}
		serving.Go(func() { _ = srv.Serve(ln) })
		fmt.Println(ln.Addr())
	}
	for in := bufio.NewScanner(os.Stdin); in.Scan(); {
		fmt.Println(accepted.Load())
	}
}
