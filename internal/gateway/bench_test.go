package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

const (
	// benchNamespace holds the benchmark's objects.
	benchNamespace = "gw-bench"
	// benchModel is the model the benchmark engine serves.
	benchModel = "bench-model"
	// benchConcurrency is the number of client goroutines.
	benchConcurrency = 8
	// benchMaxTokens is the max_tokens of every request.
	benchMaxTokens = 16
	// benchLargePrompt is the size of the large prompt.
	benchLargePrompt = 200 << 10
)

// BenchmarkGatewayOverhead measures what the gateway adds to a request: the same chat
// completion requests, from benchConcurrency goroutines over loopback, go either
// straight to one engine simulator or through the gateway to a route whose only backend
// is that engine. Each case reports the p50 and p99 latency and the throughput.
//
// The engine runs with --time-scale 0, so that every simulated delay (prefill, decode) is
// zero and it answers as fast as its HTTP and JSON handling allow: the difference
// between direct and gateway is then the gateway's own cost (reading and parsing the
// body, routing, the second hop, relaying the response), not hidden under simulated
// model latency. Its KV cache is large enough that benchConcurrency 200 KB prompts run
// at once without queueing.
//
// The gateway logs as cmd/gateway does by default (zap at info level, so the V(1)
// request log is disabled), into io.Discard.
//
// Client, engine and gateway share the machine's CPUs, so on a small machine the
// gateway's CPU also slows the engine; compare direct and gateway of one run only.
//
// The first-byte cases measure the relay of a stream instead: an engine in the test
// binary stamps the first event of each stream with the time it writes it, and the
// client, on the same clock, reports how long after that stamp it read the event
// (relay-p50-ms, relay-p99-ms), one request at a time, directly and through the gateway.
//
// The API server, the engines and the gateway are started once for every case. Run with
// KUBEBUILDER_ASSETS set (make test does), e.g.
//
//	go test -run '^$' -bench BenchmarkGatewayOverhead -benchtime 400x ./internal/gateway/
func BenchmarkGatewayOverhead(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	c := testenv.Start(b)
	c.Create(b, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}})

	e := testenv.EngineProcess(b, "127.0.0.2", benchModel, "--time-scale", "0", "--kv-blocks", "65536")
	c.EnginePod(b, benchNamespace, "engine-0", benchModel, e, map[string]string{"app": "bench"})

	listener := testenv.FreeAddr(b, "127.0.0.1")
	class, gw := gatewayObjects(b, benchNamespace, listener)
	svc := testenv.EngineService(benchNamespace, "bench", map[string]string{"app": "bench"})
	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: "bench"},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules: []gatewayv1.HTTPRouteRule{{
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{Name: "bench", Port: new(gatewayv1.PortNumber(8000))},
				}}},
			}},
		},
	}
	// The same backend behind a least-request RoutingPolicy: the inference request path,
	// which reads and parses the body, as the bench's proxy section loads it.
	policy := &v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: "bench"},
		Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}}
	route.Spec.Rules = append(route.Spec.Rules, gatewayv1.HTTPRouteRule{
		Matches:     []gatewayv1.HTTPRouteMatch{{QueryParams: []gatewayv1.HTTPQueryParamMatch{{Name: benchPolicyQuery, Value: "1"}}}},
		Filters:     []gatewayv1.HTTPRouteFilter{policyFilter(policy.Name)},
		BackendRefs: route.Spec.Rules[0].BackendRefs,
	})
	stamping := startStampingEngine(b, "127.0.0.3")
	c.EnginePod(b, benchNamespace, "stamping-0", benchModel, stamping, map[string]string{"app": "stamping"})
	route.Spec.Rules = append(route.Spec.Rules, gatewayv1.HTTPRouteRule{
		Matches: []gatewayv1.HTTPRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{Name: benchFirstByteHeader, Value: "1"}}}},
		BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{Name: "stamping", Port: new(gatewayv1.PortNumber(8000))},
		}}},
	})
	c.Create(b, class, gw, svc, policy, route,
		testenv.EngineService(benchNamespace, "stamping", map[string]string{"app": "stamping"}))
	runGateway(b, c, gateway.Options{})

	transport := &http.Transport{
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	b.Cleanup(transport.CloseIdleConnections)
	hc := &http.Client{Transport: transport, Timeout: time.Minute}
	targets := []struct{ name, url string }{
		{"direct", "http://" + e + "/v1/chat/completions"},
		{"gateway", "http://" + listener + "/v1/chat/completions"},
		{"gateway-policy", "http://" + listener + "/v1/chat/completions?" + benchPolicyQuery + "=1"},
	}

	// Wait until the gateway routes to the engine (its caches have seen every object and
	// the engine's metrics were scraped).
	probe := benchChatBody("hi", false)
	deadline := time.Now().Add(30 * time.Second)
	for _, t := range targets[1:] {
		for {
			hdr, err := benchDo(hc, t.url, probe, false, new(bytes.Buffer))
			if err == nil {
				if got, want := hdr.Get(gateway.HeaderEndpoint), benchNamespace+"/engine-0"; got != want {
					b.Fatalf("%s = %q, want %q", gateway.HeaderEndpoint, got, want)
				}
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: the gateway does not serve %s: %v", t.name, benchModel, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	b.Run("first-byte", func(b *testing.B) {
		for _, t := range []struct{ name, url string }{
			{"direct", "http://" + stamping + "/v1/chat/completions"},
			targets[1],
		} {
			b.Run(t.name, func(b *testing.B) { benchFirstByte(b, hc, t.url) })
		}
	})

	prompts := []struct{ name, text string }{
		{"short", "Say hello in one short sentence."},
		{"200KB", benchText(benchLargePrompt)},
	}
	for _, p := range prompts {
		b.Run("prompt="+p.name, func(b *testing.B) {
			for _, stream := range []bool{false, true} {
				body := benchChatBody(p.text, stream)
				b.Run("stream="+strconv.FormatBool(stream), func(b *testing.B) {
					for _, t := range targets {
						b.Run(t.name, func(b *testing.B) {
							benchLoad(b, hc, t.url, body, stream)
						})
					}
				})
			}
		})
	}
}

// benchLoad sends b.N requests of body to url from benchConcurrency goroutines and
// reports the p50 and p99 latency and the throughput.
func benchLoad(b *testing.B, hc *http.Client, url string, body []byte, stream bool) {
	// Warm up: open the connections and let both ends allocate their buffers.
	var wg sync.WaitGroup
	errs := make([]error, benchConcurrency)
	for g := range benchConcurrency {
		wg.Go(func() {
			_, errs[g] = benchDo(hc, url, body, stream, new(bytes.Buffer))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}

	var next atomic.Int64
	latencies := make([][]time.Duration, benchConcurrency)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for g := range benchConcurrency {
		wg.Go(func() {
			var buf bytes.Buffer
			lat := make([]time.Duration, 0, b.N/benchConcurrency+1)
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if _, err := benchDo(hc, url, body, stream, &buf); err != nil {
					errs[g] = err
					return
				}
				lat = append(lat, time.Since(t0))
			}
			latencies[g] = lat
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}

	all := slices.Concat(latencies...)
	if len(all) != b.N {
		b.Fatalf("%d latencies recorded, want %d", len(all), b.N)
	}
	slices.Sort(all)
	ms := func(q float64) float64 {
		i := min(int(q*float64(len(all))), len(all)-1)
		return float64(all[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
}

// benchPolicyQuery is the query parameter that routes a request through the gateway's
// rule with a RoutingPolicy.
const benchPolicyQuery = "policy"

// benchFirstByteHeader routes a request through the gateway to the stamping engine.
const benchFirstByteHeader = "X-Bench-First-Byte"

// startStampingEngine serves, on a free port of host, an engine whose every chat
// completion is a stream: a first event carrying the Unix time in nanoseconds at which
// it is written ({"stamp":N}), then, 2 ms later, the end of the stream. It answers
// /metrics and /v1/models as an idle engine serving benchModel, and returns its address.
func startStampingEngine(b *testing.B, host string) string {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "data: {\"stamp\":%d}\n\n", time.Now().UnixNano())
		w.(http.Flusher).Flush()
		time.Sleep(2 * time.Millisecond)
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	mux.HandleFunc("GET /metrics", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, benchModel)
	})
	addr := testenv.FreeAddr(b, host)
	srv := &http.Server{Addr: addr, Handler: mux}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return addr
}

// benchFirstByte sends b.N streamed requests to url, one at a time, and reports how long
// after the engine stamped the first event the client read it.
func benchFirstByte(b *testing.B, hc *http.Client, url string) {
	body := benchChatBody("hi", true)
	relay := make([]time.Duration, 0, b.N)
	first := func() (time.Duration, error) {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(benchFirstByteHeader, "1")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		event, err := bufio.NewReader(resp.Body).ReadString('\n')
		read := time.Now()
		if err != nil {
			return 0, fmt.Errorf("read the first event of %s: %w", url, err)
		}
		var stamp struct{ Stamp int64 }
		if err := json.Unmarshal([]byte(strings.TrimPrefix(event, "data: ")), &stamp); err != nil || stamp.Stamp == 0 {
			return 0, fmt.Errorf("%s: first event %q is not the stamping engine's", url, event)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return read.Sub(time.Unix(0, stamp.Stamp)), nil
	}
	if _, err := first(); err != nil { // warm up the connections
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		d, err := first()
		if err != nil {
			b.Fatal(err)
		}
		relay = append(relay, d)
	}
	b.StopTimer()
	slices.Sort(relay)
	ms := func(q float64) float64 {
		return float64(relay[min(int(q*float64(len(relay))), len(relay)-1)]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(0.50), "relay-p50-ms")
	b.ReportMetric(ms(0.99), "relay-p99-ms")
}

// benchDo posts body to url, reads the whole response into buf and checks it is a
// successful completion (a stream ends with "data: [DONE]").
func benchDo(hc *http.Client, url string, body []byte, stream bool, buf *bytes.Buffer) (http.Header, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, fmt.Errorf("read response of %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d: %.300s", url, resp.StatusCode, buf.Bytes())
	}
	if stream && !bytes.Contains(buf.Bytes(), []byte("data: [DONE]")) {
		return nil, fmt.Errorf("%s: stream did not end with [DONE]: %.300s", url, buf.Bytes())
	}
	return resp.Header, nil
}

// benchChatBody returns a chat completion request for benchModel with prompt.
func benchChatBody(prompt string, stream bool) []byte {
	b, err := json.Marshal(map[string]any{
		"model":      benchModel,
		"stream":     stream,
		"max_tokens": benchMaxTokens,
		"messages":   []map[string]string{{"role": "user", "content": prompt}},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// benchText returns n bytes of deterministic, varied English-like text.
func benchText(n int) string {
	words := strings.Fields(`the a gateway routes every request to an engine that serves
		model tokens from its cache while prefix blocks and queues grow under load so
		latency throughput policy backend listener route service pod ready stream chunk
		prompt completion retry timeout budget weight session affinity random least kv
		scheduler batch decode prefill adapter lora vector matrix kernel memory network
		cluster node replica shard region zone quickly slowly carefully often never`)
	r := rand.New(rand.NewPCG(1, 2))
	var sb strings.Builder
	sb.Grow(n + 32)
	for sentence := 0; sb.Len() < n; sentence++ {
		fmt.Fprintf(&sb, "%d.", sentence)
		for range 6 + r.IntN(14) {
			sb.WriteByte(' ')
			sb.WriteString(words[r.IntN(len(words))])
		}
		sb.WriteString(". ")
	}
	return sb.String()[:n]
}
