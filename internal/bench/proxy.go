package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The proxy section puts the gateway beside nginx and HAProxy as plain reverse proxies in
// front of one engine-sim that answers at once (--time-scale 0), and loads each with the
// same wrk run, in alternating rounds, so that what differs is the proxy alone.

// ProxyResult is one wrk run against one target with one request body.
type ProxyResult struct {
	Round int `json:"round"`
	// Body names the request body: "chat" (a ~100-byte chat completion) or "prompt-434KB".
	Body string `json:"body"`
	// Target is "direct" (the engine itself), "haproxy", "nginx", "go-net-http" (a bare
	// reverse proxy on Go's net/http, floorproxy.go) or "switchboard" (the gateway, on a
	// rule with a least-request RoutingPolicy).
	Target string  `json:"target"`
	RPS    float64 `json:"rps"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	// Errors counts wrk's socket errors and non-2xx answers.
	Errors int `json:"errors"`
	// CPUus is the CPU time the target's processes used during the run, per request
	// answered, in microseconds; 0 for "direct", which has no proxy.
	CPUus float64 `json:"cpu_us_per_request,omitempty"`
}

// ProxySettings record how the proxy section ran.
type ProxySettings struct {
	Wrk      string   `json:"wrk"`
	Rounds   int      `json:"rounds"`
	Skipped  []string `json:"skipped,omitempty"` // targets left out, with why
	Versions []string `json:"versions,omitempty"`
}

// proxyTargets are the targets of a round, in the order they run.
var proxyTargets = []string{"direct", "haproxy", "nginx", "go-net-http", "switchboard"}

// proxyBodies are the request bodies: a short chat completion and a long prompt.
func proxyBodies() map[string]string {
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 434*1024/45)
	return map[string]string{
		"chat":         `{"model":"` + benchModel + `","messages":[{"role":"user","content":"Say hello."}],"max_tokens":2}`,
		"prompt-434KB": `{"model":"` + benchModel + `","messages":[{"role":"user","content":"` + long + `"}],"max_tokens":2}`,
	}
}

// runProxy runs the proxy section: cfg.ProxyRounds rounds of every target and body.
func runProxy(ctx context.Context, cfg Config) ([]ProxyResult, ProxySettings, error) {
	settings := ProxySettings{Rounds: cfg.ProxyRounds, Wrk: fmt.Sprintf("wrk -t2 -c16 -d%s --latency", cfg.ProxyDuration)}
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		settings.Skipped = append(settings.Skipped, "every row: wrk is not installed (apt-get install wrk nginx-light haproxy; make bench runs hack/bench-peers.sh)")
		cfg.logf("proxy: skipped, wrk is not installed (apt-get install wrk nginx-light haproxy)")
		return nil, settings, nil
	}
	dir := filepath.Join(cfg.StateDir, "proxy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, settings, err
	}
	// One engine that answers at once and takes the long prompt.
	fc := cfg
	fc.Engines, fc.TimeScale, fc.KVBlocks = 1, 0, 16384
	f := newFleet(fc)
	defer f.down()
	if err := f.up(ctx); err != nil {
		return nil, settings, err
	}
	if err := f.waitRoutable(ctx); err != nil {
		return nil, settings, err
	}
	engine := f.engines[0]
	urls := map[string]string{"direct": "http://" + engine, "switchboard": f.gatewayURL}
	procs := map[string]*process{"switchboard": f.gateway}

	for _, p := range []struct {
		name    string
		start   func(context.Context, string, string) (*process, string, error)
		version func() string
	}{
		{"nginx", startNginx, func() string { return version("nginx") }},
		{"haproxy", startHAProxy, func() string { return version("haproxy") }},
		{"go-net-http", startFloorProxy, func() string { return "go-net-http built with " + runtime.Version() }},
	} {
		proc, addr, err := p.start(ctx, dir, engine)
		if err != nil {
			settings.Skipped = append(settings.Skipped, fmt.Sprintf("%s: %v", p.name, err))
			f.logf("proxy: no %s row: %v", p.name, err)
			continue
		}
		defer proc.stop()
		if err := f.waitFor(ctx, p.name+" to answer", proc, func() bool { return busy(addr) }); err != nil {
			return nil, settings, err
		}
		urls[p.name], procs[p.name] = "http://"+addr, proc
		settings.Versions = append(settings.Versions, p.version())
	}

	bodies := proxyBodies()
	var out []ProxyResult
	for round := 1; round <= cfg.ProxyRounds; round++ {
		for _, body := range []string{"chat", "prompt-434KB"} {
			script, err := wrkScript(dir, body, bodies[body])
			if err != nil {
				return nil, settings, err
			}
			for _, target := range proxyTargets {
				url, ok := urls[target]
				if !ok {
					continue
				}
				proc := procs[target]
				cpu, err := proc.cpuSeconds()
				if err != nil {
					return nil, settings, err
				}
				started := time.Now()
				r, err := runWrk(ctx, wrk, script, url+"/v1/chat/completions", cfg.ProxyDuration)
				if err != nil {
					return nil, settings, fmt.Errorf("wrk %s %s: %w", target, body, err)
				}
				after, err := proc.cpuSeconds()
				if err != nil {
					return nil, settings, err
				}
				if answered := r.RPS * time.Since(started).Seconds(); proc != nil && answered > 0 {
					r.CPUus = (after - cpu) * 1e6 / answered
				}
				r.Round, r.Body, r.Target = round, body, target
				f.logf("proxy round %d %-12s %-11s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  errors %d  CPU %4.0f µs/req",
					round, body, target, r.RPS, r.P50ms, r.P99ms, r.Errors, r.CPUus)
				out = append(out, r)
			}
		}
	}
	return out, settings, nil
}

// peer returns the path of the peer program name, installed by Debian's package pkg,
// and a free loopback address for it to listen on.
func peer(name, pkg string) (bin, addr string, err error) {
	if bin, err = exec.LookPath(name); err != nil {
		return "", "", fmt.Errorf("not installed (apt-get install %s)", pkg)
	}
	addr, err = freeAddr()
	return bin, addr, err
}

// startNginx runs nginx as a plain keep-alive reverse proxy to engine, bodies in memory.
func startNginx(_ context.Context, dir, engine string) (*process, string, error) {
	bin, addr, err := peer("nginx", "nginx-light")
	if err != nil {
		return nil, "", err
	}
	d := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, "", err
	}
	conf := fmt.Sprintf(`worker_processes 2;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  client_max_body_size 16m;
  client_body_buffer_size 1m;
  upstream engine { server %[2]s; keepalive 64; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`, d, engine, addr)
	path := filepath.Join(d, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	p, err := startProcess("nginx", filepath.Join(d, "nginx.log"), nil, bin, "-p", d, "-c", path)
	return p, addr, err
}

// startHAProxy runs HAProxy as a plain keep-alive reverse proxy to engine.
func startHAProxy(_ context.Context, dir, engine string) (*process, string, error) {
	bin, addr, err := peer("haproxy", "haproxy")
	if err != nil {
		return nil, "", err
	}
	conf := fmt.Sprintf(`global
  nbthread 2
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend bench
  bind %s
  default_backend engine
backend engine
  server engine %s
`, addr, engine)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	p, err := startProcess("haproxy", filepath.Join(dir, "haproxy.log"), nil, bin, "-db", "-f", path)
	return p, addr, err
}

// version returns the first line of name -v, for the report.
func version(name string) string {
	out, _ := exec.Command(name, "-v").CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// wrkScript writes the wrk Lua script that POSTs body on the gateway's least-request
// route, and returns its path.
func wrkScript(dir, name, body string) (string, error) {
	bodyPath := filepath.Join(dir, name+".json")
	if err := os.WriteFile(bodyPath, []byte(body), 0o644); err != nil {
		return "", err
	}
	quoted, _ := json.Marshal(bodyPath)
	script := fmt.Sprintf(`wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers[%q] = "least-request"
local f = assert(io.open(%s, "rb"))
wrk.body = f:read("*a")
f:close()
`, strategyHeader, quoted)
	path := filepath.Join(dir, name+".lua")
	return path, os.WriteFile(path, []byte(script), 0o644)
}

var (
	wrkRPS     = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkPercent = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkErrors  = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2xx  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// runWrk runs wrk -t2 -c16 for d against url with script and parses its report.
func runWrk(ctx context.Context, wrk, script, url string, d time.Duration) (ProxyResult, error) {
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, wrk, "-t2", "-c16", "-d"+strconv.Itoa(int(d.Seconds()))+"s", "--latency", "-s", script, url).CombinedOutput()
	if err != nil {
		return ProxyResult{}, fmt.Errorf("%w: %s", err, out)
	}
	return parseWrk(string(out))
}

// parseWrk reads req/s, the p50 and p99 latencies and the errors from wrk's report.
func parseWrk(out string) (ProxyResult, error) {
	var r ProxyResult
	m := wrkRPS.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no Requests/sec in wrk's output: %s", out)
	}
	r.RPS, _ = strconv.ParseFloat(m[1], 64)
	for _, p := range wrkPercent.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(p[2], 64)
		switch p[3] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		if p[1] == "50" {
			r.P50ms = v
		} else {
			r.P99ms = v
		}
	}
	if m := wrkErrors.FindStringSubmatch(out); m != nil {
		for _, n := range m[1:] {
			v, _ := strconv.Atoi(n)
			r.Errors += v
		}
	}
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		v, _ := strconv.Atoi(m[1])
		r.Errors += v
	}
	return r, nil
}

// renderProxy writes the proxy section: per body and target the range of req/s, p50 and
// p99 over the rounds, and the gateway's req/s as a ratio of nginx's in the same rounds.
func renderProxy(w writef, rs []ProxyResult, s ProxySettings) {
	if len(rs) == 0 && len(s.Skipped) == 0 {
		return
	}
	w("## 3. Proxy cost\n\n")
	w("The gateway beside nginx and HAProxy as plain keep-alive reverse proxies, in front of one engine-sim that answers at once ")
	w("(`--time-scale 0`), each loaded with `%s` POSTing a chat completion, in %d alternating rounds ", s.Wrk, s.Rounds)
	w("(direct, HAProxy, nginx, go-net-http, the gateway). The gateway serves the request on a rule with a least-request RoutingPolicy: it reads ")
	w("and parses the body, picks and reserves the endpoint and relays the answer. go-net-http is the least a reverse proxy on Go's HTTP ")
	w("stack does (net/http's server, the body read whole, http.Transport, the answer copied; no parsing, no routing): the floor of a proxy ")
	w("written in Go with the standard library. Everything shares the machine's cores: wrk, the engine and the proxy.")
	if len(s.Versions) > 0 {
		w(" Versions: %s.", strings.Join(s.Versions, "; "))
	}
	w("\n\n")
	for _, skipped := range s.Skipped {
		w("- Not measured: %s\n", skipped)
	}
	if len(s.Skipped) > 0 {
		w("\n")
	}
	if len(rs) == 0 {
		return
	}
	w("| body | target | req/s | p50 ms | p99 ms | errors | req/s vs nginx | proxy CPU µs/req |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, body := range []string{"chat", "prompt-434KB"} {
		for _, target := range proxyTargets {
			var rps, p50, p99, ratio, cpu []float64
			errs := 0
			for _, r := range rs {
				if r.Body != body || r.Target != target {
					continue
				}
				rps, p50, p99 = append(rps, r.RPS), append(p50, r.P50ms), append(p99, r.P99ms)
				if r.CPUus > 0 {
					cpu = append(cpu, r.CPUus)
				}
				errs += r.Errors
				for _, n := range rs {
					if n.Body == body && n.Target == "nginx" && n.Round == r.Round && n.RPS > 0 {
						ratio = append(ratio, r.RPS/n.RPS)
					}
				}
			}
			if len(rps) == 0 {
				continue
			}
			ratioCell := "–"
			if len(ratio) > 0 {
				ratioCell = spanOf(ratio, "%.2f") + "×"
			}
			w("| %s | %s | %s | %s | %s | %d | %s | %s |\n", body, target, spanOf(rps, "%.0f"), spanOf(p50, "%.2f"), spanOf(p99, "%.2f"), errs, ratioCell, spanOf(cpu, "%.0f"))
		}
	}
	w("\nRanges are the lowest and highest of the rounds; a ratio compares runs of the same round. The proxy's CPU is that of its ")
	w("processes (user and system, all threads and workers) over the run, divided by the requests answered: what a request costs ")
	w("the proxy, whatever the machine's other load did to the rate. The gateway's includes its background work (informers, scraping ")
	w("the one engine), a small part of it.\n\n")
}

// spanOf formats the range of vs as "lo–hi" (one value when they are equal), or "–".
func spanOf(vs []float64, format string) string {
	if len(vs) == 0 {
		return "–"
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	if fmt.Sprintf(format, lo) == fmt.Sprintf(format, hi) {
		return fmt.Sprintf(format, lo)
	}
	return fmt.Sprintf(format, lo) + "–" + fmt.Sprintf(format, hi)
}
