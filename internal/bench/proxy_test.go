package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wrkReport is wrk 4.1's report of a run with --latency, with errors and non-2xx answers.
const wrkReport = `Running 8s test @ http://127.0.0.1:8000/v1/chat/completions
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   717.52us    1.02ms  30.11ms   95.07%
    Req/Sec    11.96k     1.01k   13.92k    71.25%
  Latency Distribution
     50%  512.00us
     75%  710.00us
     90%    1.04ms
     99%    1.25s
  190482 requests in 8.00s, 58.31MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  23806.53
Transfer/sec:      7.29MB
`

func TestParseWrk(t *testing.T) {
	r, err := parseWrk(wrkReport)
	if err != nil {
		t.Fatal(err)
	}
	if r.RPS != 23806.53 || r.P50ms != 0.512 || r.P99ms != 1250 || r.Errors != 7 {
		t.Errorf("parseWrk = %+v, want 23806.53 req/s, p50 0.512 ms, p99 1250 ms, 7 errors", r)
	}
	if _, err := parseWrk("unable to connect to 127.0.0.1:1 Connection refused"); err == nil {
		t.Error("parseWrk of a failed run: no error")
	}
}

func TestRenderProxy(t *testing.T) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	renderProxy(w, []ProxyResult{
		{Round: 1, Body: "chat", Target: "nginx", RPS: 20000, P50ms: 0.5, P99ms: 4},
		{Round: 1, Body: "chat", Target: "switchboard", RPS: 10000, P50ms: 1.5, P99ms: 5, CPUus: 61},
		{Round: 2, Body: "chat", Target: "nginx", RPS: 25000, P50ms: 0.4, P99ms: 4},
		{Round: 2, Body: "chat", Target: "switchboard", RPS: 15000, P50ms: 1.2, P99ms: 5, Errors: 1, CPUus: 58},
	}, ProxySettings{Wrk: "wrk -t2 -c16 -d8s --latency", Rounds: 2, Skipped: []string{"haproxy: not installed"}})
	out := b.String()
	for _, want := range []string{
		"| chat | nginx | 20000–25000 | 0.40–0.50 | 4.00 | 0 | 1.00× | – |",
		"| chat | switchboard | 10000–15000 | 1.20–1.50 | 5.00 | 1 | 0.50–0.60× | 58–61 |",
		"- Not measured: haproxy: not installed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the proxy section lacks %q:\n%s", want, out)
		}
	}
}

func TestCPUSecondsCountsTheWholeGroup(t *testing.T) {
	// The shell only waits; the CPU is its child's, a bounded busy loop.
	p, err := startProcess("burn", filepath.Join(t.TempDir(), "burn.log"), nil, "/bin/sh", "-c",
		`sh -c '`+busyLoop+`' & wait`)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	waitForCPU(t, p)
	if s, err := (*process)(nil).cpuSeconds(); s != 0 || err != nil {
		t.Errorf("a nil process used %.2f s of CPU, %v", s, err)
	}
}

// TestCPUSecondsReadsCommandsWithParentheses runs the busy loop in a shell whose
// command name holds ") " and spaces, which /proc/<pid>/stat shows inside the
// parentheses of its second field.
func TestCPUSecondsReadsCommandsWithParentheses(t *testing.T) {
	dir := t.TempDir()
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "burn) 1 2")
	if err := os.WriteFile(bin, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := startProcess("burn", filepath.Join(dir, "burn.log"), nil, bin, "-c", busyLoop)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	waitForCPU(t, p)
}

// busyLoop is a shell loop that keeps a core busy for a bounded time.
const busyLoop = `i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done`

// waitForCPU waits until p's group has used 0.05 s of CPU, failing t if p exits or 20 s
// pass first.
func waitForCPU(t *testing.T, p *process) {
	t.Helper()
	cpu := func() float64 {
		t.Helper()
		s, err := p.cpuSeconds()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for deadline := time.Now().Add(20 * time.Second); cpu() < 0.05; time.Sleep(10 * time.Millisecond) {
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("the group's CPU stayed at %.2f s", cpu())
		}
	}
}
