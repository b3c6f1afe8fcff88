package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// attemptCounter counts the inference requests each engine receives by request id.
type attemptCounter struct {
	mu     sync.Mutex
	byID   map[string]int
	byHost map[string]int
}

// proxy serves on a free port of engine's host and forwards to engine, counting every
// POST; it returns the address to register as the pod's.
func (c *attemptCounter) proxy(t *testing.T, engine string) string {
	t.Helper()
	host, _, _ := net.SplitHostPort(engine)
	ln := testenv.Listen(t, host)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: engine})
	rp.FlushInterval = -1
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			c.mu.Lock()
			c.byID[r.Header.Get(gateway.HeaderRequestID)]++
			c.byHost[engine]++
			c.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestOutlierDetection runs least-request over four engines, one of which answers every
// inference request with a 500 at once: the 5xx answers are retried elsewhere, the
// failing engine is ejected, and clients see (almost) no failure.
func TestOutlierDetection(t *testing.T) {
	const ns = "outlier-test"
	c := testenv.Start(t)
	counter := &attemptCounter{byID: map[string]int{}, byHost: map[string]int{}}
	var failing string
	engines := make([]string, 4)
	for i := range engines {
		var flags []string
		if i == 3 {
			flags = []string{"--fault-fail-fraction", "1"}
		}
		engine := testenv.EngineProcess(t, fmt.Sprintf("127.0.0.%d", 2+i), "llama-3-8b", flags...)
		if i == 3 {
			failing = engine
		}
		engines[i] = counter.proxy(t, engine)
	}
	g, view, base, registry := policyGateway(t, c, ns, v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}, engines)
	testenv.WaitUntil(t, waitTimeout, "the gateway routes llama-3-8b over four pods", func() bool {
		m, ok := view.Model("llama-3-8b")
		if !ok || len(m.Endpoints()) != 4 {
			return false
		}
		status, _ := post(base, "", chatBody("llama-3-8b", false))
		return status == http.StatusOK
	})
	counter.mu.Lock()
	clear(counter.byID)
	clear(counter.byHost)
	counter.mu.Unlock()

	const requests = 200
	failures := 0
	for i := range requests {
		req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(chatBody("llama-3-8b", false)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(gateway.HeaderRequestID, fmt.Sprintf("req-%d", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			failures++
		}
	}
	counter.mu.Lock()
	maxTries := 0
	for _, n := range counter.byID {
		maxTries = max(maxTries, n)
	}
	toFailing := counter.byHost[failing]
	counter.mu.Unlock()
	t.Logf("%d of %d requests failed (%.1f%%); %d tries reached the failing engine; at most %d tries per request",
		failures, requests, 100*float64(failures)/requests, toFailing, maxTries)
	if failures*100 >= requests {
		t.Errorf("%d of %d requests failed, want under 1%%", failures, requests)
	}
	if maxTries > gateway.DefaultRetryAttempts+1 {
		t.Errorf("a request was tried %d times, want at most %d", maxTries, gateway.DefaultRetryAttempts+1)
	}
	if toFailing > 10 {
		t.Errorf("the failing engine received %d tries, want it ejected after a few", toFailing)
	}

	p, ok := view.Pod(endpoint.Key{Namespace: ns, Name: "llama-3"})
	if !ok || !g.EndpointEjected(&p.Endpoint) {
		t.Error("the failing pod llama-3 is not ejected")
	}
	got := map[string]float64{}
	for _, name := range []string{"switchboard_gateway_ejections_total", "switchboard_gateway_ejected_endpoints", "switchboard_gateway_retries_total"} {
		got[name] = metricValue(t, registry, name)
	}
	if got["switchboard_gateway_ejections_total"] != 1 || got["switchboard_gateway_ejected_endpoints"] != 1 {
		t.Errorf("ejection metrics = %v, want one ejection and one ejected endpoint", got)
	}
	// Every try that reached the failing engine but the last of a failed request was
	// followed by a retry elsewhere.
	if retries := got["switchboard_gateway_retries_total"]; retries < float64(toFailing-failures) {
		t.Errorf("switchboard_gateway_retries_total = %v, want at least the %d tries of the failing engine that did not fail their request", retries, toFailing-failures)
	}
}
