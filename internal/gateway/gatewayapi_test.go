package gateway_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

const (
	tenantA = "team-a"
	tenantB = "team-b"
)

// echoed is what an echo backend answers: the request as it arrived, and who it is.
type echoed struct {
	Pod, Method, Path, Host, Proto string
	Headers                        http.Header
	BodyBytes                      int
}

// echoServer serves, on a free port of host, an HTTP backend that answers every request
// with its echoed JSON, counting requests, after the duration of its query parameter
// delay, if any. With the query parameter stall, it instead sends its headers and a first
// chunk, then nothing until the request ends, and closes stalled (if set) then. It stops
// when the test ends.
func echoServer(t testing.TB, host, pod string) (addr string, hits *atomic.Int64) {
	t.Helper()
	return echoServerSpeaking(t, host, pod, nil)
}

// echoServerSpeaking is echoServer speaking protocols (nil: HTTP/1.1).
func echoServerSpeaking(t testing.TB, host, pod string, protocols *http.Protocols) (addr string, hits *atomic.Int64) {
	t.Helper()
	ln := testenv.Listen(t, host)
	hits = new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Query().Has("stall") {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
			return
		}
		if r.URL.Query().Has("trailer") {
			w.Header().Set("Trailer", "X-Checksum")
			defer func() { w.Header().Set("X-Checksum", "c0ffee") }()
		}
		if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil {
			select { // a slow backend, for timeouts
			case <-time.After(min(d, 5*time.Second)):
			case <-r.Context().Done():
			}
		}
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(echoed{Pod: pod, Method: r.Method, Path: r.URL.RequestURI(), Host: r.Host, Proto: r.Proto,
			Headers: r.Header, BodyBytes: int(n)})
	}), Protocols: protocols}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), hits
}

// upgradeEchoServer serves, on a free port of host, a backend that switches every
// request with Upgrade: echo to a protocol echoing what it receives. It stops when the
// test ends.
func upgradeEchoServer(t testing.TB, host string) string {
	t.Helper()
	ln := testenv.Listen(t, host)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade to echo", http.StatusUpgradeRequired)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(conn, brw)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// webPod registers a plain (non-engine) Pod ns/name labelled app=app whose container
// port "web" is the port of addr, Running and Ready at addr's IP.
func webPod(t testing.TB, c *testenv.Cluster, ns, name, app, addr string) {
	t.Helper()
	host, p, _ := net.SplitHostPort(addr)
	var port int32
	_, _ = fmt.Sscan(p, &port)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "echo",
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: port}}}}},
	}
	c.Create(t, pod)
	c.SetPodReady(t, pod, host, true)
}

// webService is a Service ns/name selecting app=name pods, port 80 → container port "web".
func webService(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("web")}}},
	}
}

// backend is a backendRef to Service name (namespace/name for another namespace) on
// port with weight.
func backend(name string, port, weight int32) gatewayv1.HTTPBackendRef {
	ref := gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
		Name: gatewayv1.ObjectName(name), Port: new(gatewayv1.PortNumber(port))}, Weight: new(weight)}
	if ns, n, ok := strings.Cut(name, "/"); ok {
		ref.Namespace, ref.Name = new(gatewayv1.Namespace(ns)), gatewayv1.ObjectName(n)
	}
	return gatewayv1.HTTPBackendRef{BackendRef: ref}
}

// route is an HTTPRoute ns/name on Gateway gw for hostname with one rule.
// backendWithHeader is backendRef name:80 whose own filters set request header
// X-Backend and response header X-From to value.
func backendWithHeader(name, value string) gatewayv1.HTTPBackendRef {
	b := backend(name, 80, 1)
	b.Filters = []gatewayv1.HTTPRouteFilter{
		{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{
			Set: []gatewayv1.HTTPHeader{{Name: "X-Backend", Value: value}}}},
		{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{
			Set: []gatewayv1.HTTPHeader{{Name: "X-From", Value: value}}}},
	}
	return b
}

func route(ns, name, gw, hostname string, rule gatewayv1.HTTPRouteRule) *gatewayv1.HTTPRoute {
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: gatewayv1.ObjectName(gw)}}},
			Hostnames:       []gatewayv1.Hostname{gatewayv1.Hostname(hostname)},
			Rules:           []gatewayv1.HTTPRouteRule{rule},
		},
	}
}

// policyFilter is the ExtensionRef filter applying RoutingPolicy name.
func policyFilter(name string) gatewayv1.HTTPRouteFilter {
	return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterExtensionRef, ExtensionRef: &gatewayv1.LocalObjectReference{
		Group: gatewayv1.Group(v1alpha1.GroupVersion.Group), Kind: "RoutingPolicy", Name: gatewayv1.ObjectName(name)}}
}

// send sends method path with Host host and body to base and returns the status, the
// headers and the echoed request (zero when the answer is not an echo).
func send(t testing.TB, base, method, host, path, body string, header ...string) (int, http.Header, echoed) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, echoed{} // not listening yet, or the connection failed
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e echoed
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, resp.Header, e
}

// get sends GET path with Host host to base through client and returns the response; the
// test fails without one.
func get(t testing.TB, client *http.Client, base, host, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestGatewayAPIRouting drives a real gateway (in process) over HTTP against a real API
// server: tenant isolation across namespaces, backend weights, plain Gateway API rules,
// Core and extended filters, Gateways isolated on their own addresses, and the scope of
// the ext_proc picker.
func TestGatewayAPIRouting(t *testing.T) {
	c := testenv.Start(t)
	for _, n := range []string{tenantA, tenantB} {
		c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	// team-b's engine: what team-a must not reach without a grant.
	secret := testenv.EngineProcess(t, "127.0.0.20", "secret-model")
	c.EnginePod(t, tenantB, "secret-0", "secret-model", secret, map[string]string{"app": "secret"})
	// team-a's engine and plain web backends.
	llama := testenv.EngineProcess(t, "127.0.0.21", "llama-3-8b")
	c.EnginePod(t, tenantA, "llama-0", "llama-3-8b", llama, map[string]string{"app": "llama"})
	webA, hitsA := echoServer(t, "127.0.0.22", "web-a")
	webB, hitsB := echoServer(t, "127.0.0.23", "web-b")
	mirrorAddr, mirrorHits := echoServer(t, "127.0.0.24", "mirror")
	var h2cOnly http.Protocols
	h2cOnly.SetUnencryptedHTTP2(true)
	webH2C, _ := echoServerSpeaking(t, "127.0.0.26", "web-h2c", &h2cOnly)
	webUpgrade := upgradeEchoServer(t, "127.0.0.27")
	webPod(t, c, tenantA, "web-ws", "web-ws", webUpgrade)
	webPod(t, c, tenantA, "web-h2c", "web-h2c", webH2C)
	h2cService := webService(tenantA, "web-h2c")
	h2cService.Spec.Ports[0].AppProtocol = new("kubernetes.io/h2c")
	webPod(t, c, tenantA, "web-a", "web-a", webA)
	webPod(t, c, tenantA, "web-b", "web-b", webB)
	webPod(t, c, tenantA, "mirror", "mirror", mirrorAddr)
	unready := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "web-empty", Labels: map[string]string{"app": "web-empty"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "echo"}}}}
	c.Create(t, unready)

	listener := testenv.FreeAddr(t, "127.0.0.1")
	class, gw := gatewayObjects(t, tenantA, listener)
	_, port, _ := net.SplitHostPort(listener)
	var listenerPort int32
	_, _ = fmt.Sscan(port, &listenerPort)
	other := gw.DeepCopy()
	other.Name, other.Spec.Addresses = "other", []gatewayv1.GatewaySpecAddress{{Value: "127.0.0.25"}}
	other.Spec.Listeners[0].Hostname = new(gatewayv1.Hostname("web.example"))
	c.Create(t, class, gw, other,
		testenv.EngineService(tenantB, "secret-svc", map[string]string{"app": "secret"}),
		testenv.EngineService(tenantA, "llama", map[string]string{"app": "llama"}),
		webService(tenantA, "web-a"), webService(tenantA, "web-b"), webService(tenantA, "web-empty"), webService(tenantA, "mirror"), h2cService, webService(tenantA, "web-ws"),
		&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: "rp"},
			Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}},
		route(tenantA, "leak", "gw", "leak.example", gatewayv1.HTTPRouteRule{
			Filters: []gatewayv1.HTTPRouteFilter{policyFilter("rp")}, BackendRefs: []gatewayv1.HTTPBackendRef{backend(tenantB+"/secret-svc", 8000, 1)}}),
		route(tenantA, "leak-plain", "gw", "leak-plain.example", gatewayv1.HTTPRouteRule{
			BackendRefs: []gatewayv1.HTTPBackendRef{backend(tenantB+"/secret-svc", 8000, 1)}}),
		route(tenantA, "empty", "gw", "empty.example", gatewayv1.HTTPRouteRule{Filters: []gatewayv1.HTTPRouteFilter{policyFilter("rp")}}),
		route(tenantA, "own", "gw", "own.example", gatewayv1.HTTPRouteRule{
			Filters: []gatewayv1.HTTPRouteFilter{policyFilter("rp")}, BackendRefs: []gatewayv1.HTTPBackendRef{backend("llama", 8000, 1)}}),
		route(tenantA, "split", "gw", "split.example", gatewayv1.HTTPRouteRule{
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-a", 80, 3), backend("web-b", 80, 1)}}),
		route(tenantA, "drain", "gw", "drain.example", gatewayv1.HTTPRouteRule{
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-a", 80, 1), backend("web-b", 80, 0)}}),
		route(tenantA, "half-rejected", "gw", "half-rejected.example", gatewayv1.HTTPRouteRule{
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-a", 80, 1), backend("no-such-service", 80, 1)}}),
		route(tenantA, "skip-empty", "gw", "skip-empty.example", gatewayv1.HTTPRouteRule{
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-empty", 80, 1), backend("web-b", 80, 1)}}),
		route(tenantA, "filters", "gw", "filters.example", gatewayv1.HTTPRouteRule{
			Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: new(gatewayv1.PathMatchPathPrefix), Value: new("/old")}}},
			Filters: []gatewayv1.HTTPRouteFilter{
				{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{
					Set: []gatewayv1.HTTPHeader{{Name: "X-Tenant", Value: "a"}}, Remove: []string{"X-Secret"}}},
				{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{
					Add: []gatewayv1.HTTPHeader{{Name: "X-Served-By", Value: "switchboard"}}}},
				{Type: gatewayv1.HTTPRouteFilterURLRewrite, URLRewrite: &gatewayv1.HTTPURLRewriteFilter{
					Hostname: new(gatewayv1.PreciseHostname("rewritten.example")),
					Path:     &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: new("/new")}}},
				{Type: gatewayv1.HTTPRouteFilterRequestMirror, RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{
					BackendRef: gatewayv1.BackendObjectReference{Name: "mirror", Port: new(gatewayv1.PortNumber(80))}}},
			},
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-a", 80, 1)}}),
		route(tenantA, "redirect", "gw", "redirect.example", gatewayv1.HTTPRouteRule{
			Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestRedirect, RequestRedirect: &gatewayv1.HTTPRequestRedirectFilter{
				Hostname: new(gatewayv1.PreciseHostname("elsewhere.example")), StatusCode: new(301)}}}}),
		route(tenantA, "inference-with-filters", "gw", "both.example", gatewayv1.HTTPRouteRule{
			Filters: []gatewayv1.HTTPRouteFilter{policyFilter("rp"), {Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier,
				ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-Policy", Value: "rp"}}}}},
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("llama", 8000, 1)}}),
		route(tenantA, "foreign-extension", "gw", "foreign.example", gatewayv1.HTTPRouteRule{
			Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterExtensionRef, ExtensionRef: &gatewayv1.LocalObjectReference{
				Group: "example.com", Kind: "RateLimit", Name: "x"}}},
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-a", 80, 1)}}),
		route(tenantA, "backend-filters", "gw", "backend-filters.example", gatewayv1.HTTPRouteRule{
			BackendRefs: []gatewayv1.HTTPBackendRef{backendWithHeader("web-a", "a"), backendWithHeader("web-b", "b")}}),
		route(tenantA, "request-timeout", "gw", "request-timeout.example", gatewayv1.HTTPRouteRule{
			Timeouts:    &gatewayv1.HTTPRouteTimeouts{Request: new(gatewayv1.Duration("300ms"))},
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-a", 80, 1)}}),
		route(tenantA, "backend-timeout", "gw", "backend-timeout.example", gatewayv1.HTTPRouteRule{
			Timeouts:    &gatewayv1.HTTPRouteTimeouts{BackendRequest: new(gatewayv1.Duration("300ms"))},
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-a", 80, 1)}}),
		route(tenantA, "upgrade", "gw", "ws.example", gatewayv1.HTTPRouteRule{
			Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier,
				ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-Route", Value: "upgrade"}}}}},
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-ws", 80, 1)}}),
		route(tenantA, "h2c", "gw", "h2c.example", gatewayv1.HTTPRouteRule{
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-h2c", 80, 1)}}),
		route(tenantA, "on-other", "other", "web.example", gatewayv1.HTTPRouteRule{
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-b", 80, 1)}}),
	)

	// A seeded source makes the weighted draws repeatable, so the split checks cannot flake.
	var mu sync.Mutex
	rnd := rand.New(rand.NewPCG(1, 2))
	g, _ := runGateway(t, c, gateway.Options{UpstreamTimeout: 5 * time.Second, UpstreamIdleTimeout: time.Second, Random: func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return rnd.IntN(n)
	}})
	base := "http://" + listener
	chat := func(host, model string) (int, http.Header) {
		status, hdr, _ := send(t, base, http.MethodPost, host, "/v1/chat/completions", string(chatBody(model, false)))
		return status, hdr
	}
	testenv.WaitUntil(t, waitTimeout, "the gateway serves own.example", func() bool {
		status, _ := chat("own.example", "llama-3-8b")
		return status == http.StatusOK
	})

	t.Run("a route reaches another namespace only with a ReferenceGrant", func(t *testing.T) {
		for _, host := range []string{"leak.example", "leak-plain.example"} {
			for range 5 {
				status, hdr := chat(host, "secret-model")
				if status != http.StatusInternalServerError || hdr.Get(gateway.HeaderEndpoint) != "" {
					t.Fatalf("%s without a ReferenceGrant: %d endpoint %q, want 500 and no endpoint", host, status, hdr.Get(gateway.HeaderEndpoint))
				}
			}
		}
		c.Create(t, &gatewayv1.ReferenceGrant{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenantB, Name: "team-a-routes"},
			Spec: gatewayv1.ReferenceGrantSpec{
				From: []gatewayv1.ReferenceGrantFrom{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Namespace: tenantA}},
				To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: "Service"}},
			},
		})
		testenv.WaitUntil(t, waitTimeout, "the granted route serves team-b's engine", func() bool {
			status, hdr := chat("leak.example", "secret-model")
			return status == http.StatusOK && hdr.Get(gateway.HeaderEndpoint) == tenantB+"/secret-0"
		})
	})

	t.Run("a rule without backends answers 500", func(t *testing.T) {
		if status, hdr := chat("empty.example", "secret-model"); status != http.StatusInternalServerError || hdr.Get(gateway.HeaderEndpoint) != "" {
			t.Errorf("rule without backendRefs: %d endpoint %q, want 500 and no endpoint", status, hdr.Get(gateway.HeaderEndpoint))
		}
	})

	t.Run("an unknown path on an inference rule is proxied by its model", func(t *testing.T) {
		status, hdr, _ := send(t, base, http.MethodPost, "own.example", "/v1/not-an-api", `{"model":"llama-3-8b"}`)
		if status == 0 || hdr.Get(gateway.HeaderEndpoint) != tenantA+"/llama-0" {
			t.Errorf("unknown path: %d endpoint %q, want the engine's answer from %s/llama-0", status, hdr.Get(gateway.HeaderEndpoint), tenantA)
		}
	})

	t.Run("the models of an inference rule come from the cache", func(t *testing.T) {
		resp := get(t, http.DefaultClient, base, "own.example", "/v1/models")
		defer resp.Body.Close()
		var list struct{ Data []struct{ ID string } }
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK || len(list.Data) != 1 || list.Data[0].ID != "llama-3-8b" ||
			resp.Header.Get(gateway.HeaderEndpoint) != "" {
			t.Errorf("models of own.example = %+v (%v), want only llama-3-8b, answered by the gateway", list, err)
		}
	})

	t.Run("a model outside the rule's backends is not served", func(t *testing.T) {
		if status, hdr := chat("own.example", "secret-model"); status != http.StatusNotFound || hdr.Get(gateway.HeaderEndpoint) != "" {
			t.Errorf("team-b's model on team-a's route: %d endpoint %q, want 404 and no endpoint", status, hdr.Get(gateway.HeaderEndpoint))
		}
	})

	count := func(host string, n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range n {
			status, hdr, e := send(t, base, http.MethodGet, host, "/", "")
			switch {
			case status == http.StatusOK && e.Pod != "" && hdr.Get(gateway.HeaderEndpoint) == tenantA+"/"+e.Pod:
				got[e.Pod]++
			default:
				got[fmt.Sprint(status)]++
			}
		}
		return got
	}
	t.Run("weights split the traffic", func(t *testing.T) {
		const n = 1000
		got := count("split.example", n)
		share := float64(got["web-a"]) / n
		t.Logf("3:1 split over %d requests: %v (web-a %.1f%%)", n, got, share*100)
		if got["web-a"]+got["web-b"] != n || share < 0.70 || share > 0.80 {
			t.Errorf("3:1 split = %v, want web-a at 75%% ± 5%% and nothing else", got)
		}
	})
	t.Run("weight 0 drains a backend", func(t *testing.T) {
		before := hitsB.Load()
		if got := count("drain.example", 100); got["web-a"] != 100 || hitsB.Load() != before {
			t.Errorf("weight 0: %v, web-b got %d, want every request on web-a", got, hitsB.Load()-before)
		}
	})
	t.Run("a rejected backend's share answers 500", func(t *testing.T) {
		got := count("half-rejected.example", 200)
		t.Logf("1:1 with a rejected backend over 200 requests: %v", got)
		if got["web-a"]+got["500"] != 200 || got["500"] < 70 || got["500"] > 130 {
			t.Errorf("half rejected = %v, want about 100 answered 500 and the rest on web-a", got)
		}
	})
	t.Run("a backend without ready pods gives its share to the others", func(t *testing.T) {
		if got := count("skip-empty.example", 50); got["web-b"] != 50 {
			t.Errorf("one empty backend: %v, want all 50 on web-b", got)
		}
	})

	t.Run("plain rules proxy any request unchanged", func(t *testing.T) {
		hdr := []string{"X-Anything", "kept"}
		status, h, e := send(t, base, http.MethodPut, "split.example", "/any/path?q=1", strings.Repeat("x", 5000), hdr...)
		if status != http.StatusOK || e.Method != http.MethodPut || e.Path != "/any/path?q=1" || e.BodyBytes != 5000 ||
			e.Host != "split.example" || e.Headers.Get("X-Anything") != "kept" {
			t.Errorf("plain PUT: %d %+v", status, e)
		}
		if h.Get(gateway.HeaderRequestID) == "" || h.Get(gateway.HeaderEndpoint) == "" {
			t.Errorf("plain response headers %v lack %s or %s", h, gateway.HeaderRequestID, gateway.HeaderEndpoint)
		}
	})

	t.Run("trailers reach the client", func(t *testing.T) {
		resp := get(t, http.DefaultClient, base, "split.example", "/any?trailer=1")
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if got := resp.Trailer.Get("X-Checksum"); resp.StatusCode != http.StatusOK || got != "c0ffee" {
			t.Errorf("status %d, trailer X-Checksum %q; want 200 and the backend's c0ffee", resp.StatusCode, got)
		}
	})

	t.Run("a stalled backend is cut off", func(t *testing.T) {
		// The backend sends one event and then nothing: the gateway ends the response after
		// its idle timeout (1 s here), before the client's own deadline (30 s) does.
		resp := get(t, &http.Client{Timeout: 30 * time.Second}, base, "split.example", "/events?stall=1")
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Errorf("the stalled stream ran until the client's deadline: %v", err)
		}
		if !strings.Contains(string(body), "data: first") {
			t.Errorf("stalled response %q lacks the event the backend sent before stalling", body)
		}
	})

	t.Run("hop-by-hop and forwarding headers", func(t *testing.T) {
		status, _, e := send(t, base, http.MethodGet, "split.example", "/", "",
			"Connection", "X-Hop", "X-Hop", "for this hop only", "X-Forwarded-For", "10.0.0.1")
		if status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		if e.Headers.Get("X-Hop") != "" {
			t.Errorf("a header the client's Connection names reached the backend: %v", e.Headers)
		}
		if got := e.Headers.Get("X-Forwarded-For"); got != "10.0.0.1, 127.0.0.1" {
			t.Errorf("X-Forwarded-For = %q, want the client's list with the client appended", got)
		}
		if got := e.Headers.Get("X-Forwarded-Proto"); got != "http" {
			t.Errorf("X-Forwarded-Proto = %q, want http", got)
		}
	})

	t.Run("filters", func(t *testing.T) {
		before := mirrorHits.Load()
		status, h, e := send(t, base, http.MethodGet, "filters.example", "/old/page", "", "X-Secret", "s3cret")
		if status != http.StatusOK || e.Path != "/new/page" || e.Host != "rewritten.example" ||
			e.Headers.Get("X-Tenant") != "a" || e.Headers.Get("X-Secret") != "" || h.Get("X-Served-By") != "switchboard" {
			t.Errorf("filtered request: %d %+v, response headers %v", status, e, h)
		}
		testenv.WaitUntil(t, waitTimeout, "the mirror receives the request", func() bool { return mirrorHits.Load() > before })

		status, h, _ = send(t, base, http.MethodGet, "redirect.example", "/x?y=1", "")
		if want := "http://elsewhere.example:" + port + "/x?y=1"; status != http.StatusMovedPermanently || h.Get("Location") != want {
			t.Errorf("redirect: %d Location %q, want 301 %q", status, h.Get("Location"), want)
		}

		status, h = chat("both.example", "llama-3-8b")
		if status != http.StatusOK || h.Get("X-Policy") != "rp" {
			t.Errorf("inference rule with a filter: %d X-Policy %q, want 200 rp", status, h.Get("X-Policy"))
		}

		hitsBefore := hitsA.Load()
		if status, _, _ := send(t, base, http.MethodGet, "foreign.example", "/", ""); status != http.StatusInternalServerError || hitsA.Load() != hitsBefore {
			t.Errorf("ExtensionRef to an unknown kind: %d, want 500 and no request upstream", status)
		}
	})

	t.Run("a backendRef's filters apply to its requests only", func(t *testing.T) {
		seen := map[string]bool{}
		for range 20 {
			status, h, e := send(t, base, http.MethodGet, "backend-filters.example", "/", "")
			want := strings.TrimPrefix(e.Pod, "web-")
			if status != http.StatusOK || e.Headers.Get("X-Backend") != want || h.Get("X-From") != want {
				t.Fatalf("request served by %s: %d, X-Backend %q, response X-From %q; want 200 and %q twice",
					e.Pod, status, e.Headers.Get("X-Backend"), h.Get("X-From"), want)
			}
			seen[e.Pod] = true
		}
		if len(seen) != 2 {
			t.Errorf("20 requests reached only %v; want both backends", seen)
		}
	})

	t.Run("HTTP/2 in clear text, from clients and to kubernetes.io/h2c backends", func(t *testing.T) {
		if status, _, e := send(t, base, http.MethodGet, "h2c.example", "/", ""); status != http.StatusOK || e.Pod != "web-h2c" || e.Proto != "HTTP/2.0" {
			t.Errorf("HTTP/1.1 request to an h2c backend: %d from %q over %q, want 200 from web-h2c over HTTP/2.0", status, e.Pod, e.Proto)
		}
		var h2c http.Protocols
		h2c.SetUnencryptedHTTP2(true)
		client := &http.Client{Transport: &http.Transport{Protocols: &h2c}}
		defer client.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
		req.Host = "split.example"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("h2c request with prior knowledge: %v", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/2.0" {
			t.Errorf("h2c request with prior knowledge: %d over %s, want 200 over HTTP/2.0", resp.StatusCode, resp.Proto)
		}
	})

	t.Run("a backend that switches protocols gets a two-way connection", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", listener, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "GET /chat HTTP/1.1\r\nHost: ws.example\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read the answer to the upgrade: %v", err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" ||
			resp.Header.Get("X-Route") != "upgrade" || resp.Header.Get(gateway.HeaderEndpoint) != tenantA+"/web-ws" {
			t.Fatalf("upgrade answer: %d %v, want 101 Upgrade echo from web-ws with the route's header", resp.StatusCode, resp.Header)
		}
		for _, msg := range []string{"hello\n", "again\n"} {
			if _, err := io.WriteString(conn, msg); err != nil {
				t.Fatal(err)
			}
			got, err := br.ReadString('\n')
			if err != nil || got != msg {
				t.Fatalf("echoed %q, %v; want %q", got, err, msg)
			}
		}
	})

	t.Run("a rule's timeouts answer 504", func(t *testing.T) {
		for _, host := range []string{"request-timeout.example", "backend-timeout.example"} {
			if status, _, _ := send(t, base, http.MethodGet, host, "/?delay=2s", ""); status != http.StatusGatewayTimeout {
				t.Errorf("%s, backend answering after 2s: %d, want 504", host, status)
			}
			if status, _, e := send(t, base, http.MethodGet, host, "/?delay=10ms", ""); status != http.StatusOK || e.Pod != "web-a" {
				t.Errorf("%s, backend answering after 10ms: %d from %q, want 200 from web-a", host, status, e.Pod)
			}
		}
	})

	t.Run("Gateways are served on their own addresses", func(t *testing.T) {
		otherBase := "http://127.0.0.25:" + port
		testenv.WaitUntil(t, waitTimeout, "the other Gateway serves its route", func() bool {
			status, _, e := send(t, otherBase, http.MethodGet, "web.example", "/", "")
			return status == http.StatusOK && e.Pod == "web-b"
		})
		if status, _, _ := send(t, base, http.MethodGet, "web.example", "/", ""); status != http.StatusNotFound {
			t.Errorf("the other Gateway's route on gw's address: %d, want 404", status)
		}
		if status, h, _ := send(t, base, http.MethodHead, "web.example", "/", ""); status != http.StatusNotFound || h.Get("Content-Type") != "" {
			t.Errorf("HEAD without a route: %d Content-Type %q, want 404 without a body type", status, h.Get("Content-Type"))
		}
		if status, _, _ := send(t, otherBase, http.MethodGet, "split.example", "/", ""); status != http.StatusNotFound {
			t.Errorf("gw's route on the other Gateway's address: %d, want 404", status)
		}
		// A newer Gateway asking for gw's address and port is not served there.
		squatter := gw.DeepCopy()
		squatter.ObjectMeta = metav1.ObjectMeta{Namespace: tenantA, Name: "squatter"}
		c.Create(t, squatter, route(tenantA, "squat", "squatter", "squat.example", gatewayv1.HTTPRouteRule{
			BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-b", 80, 1)}}))
		testenv.WaitUntil(t, waitTimeout, "the gateway knows the squatter and its route", func() bool {
			known := false
			for _, gw := range g.Table().Gateways() {
				known = known || gw.Gateway.Name == "squatter" && gw.Unserved == gatewayv1.GatewayReasonAddressNotUsable
			}
			for _, rs := range g.Table().Routes() {
				if rs.Route.Name == "squat" {
					return known
				}
			}
			return false
		})
		if status, _, _ := send(t, base, http.MethodGet, "squat.example", "/", ""); status != http.StatusNotFound {
			t.Errorf("a newer Gateway on the same address: %d, want 404", status)
		}
		if status, _, e := send(t, base, http.MethodGet, "split.example", "/", ""); status != http.StatusOK || e.Pod == "" {
			t.Errorf("gw after a newer Gateway claimed its address: %d, want 200", status)
		}
	})

	t.Run("the ext_proc picker stays in its scope", func(t *testing.T) {
		scope := gateway.PickScope{Namespace: tenantA}
		if dest, status, _ := pickOverExtProc(t, g, scope, chatBody("secret-model", false)); status != http.StatusNotFound || dest != "" {
			t.Errorf("team-b's model from a team-a picker: destination %q status %d, want 404", dest, status)
		}
		dest, _, done := pickOverExtProc(t, g, scope, chatBody("llama-3-8b", false))
		done()
		if dest != llama {
			t.Errorf("picker destination %q, want %s", dest, llama)
		}
	})

	t.Run("stalled bodies pin no memory and others are served", func(t *testing.T) {
		const stalled = 500
		before := testenv.HeapInUse()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for range stalled {
			conn, err := net.Dial("tcp", listener)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, conn)
			if _, err := fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: own.example\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 16<<20); err != nil {
				t.Fatal(err)
			}
		}
		testenv.WaitUntil(t, 30*time.Second, "every stalled request waits in the body read", func() bool {
			return testenv.GoroutinesBlockedIn("inbound.ReadBody(") >= stalled
		})
		during := testenv.HeapInUse()
		t.Logf("heap in use: %.1f MiB before, %.1f MiB with %d requests declaring 16 MiB bodies and sending none", testenv.MiB(before), testenv.MiB(during), stalled)
		if during > 100<<20 {
			t.Errorf("heap in use %.1f MiB with %d stalled bodies, want under 100 MiB", testenv.MiB(during), stalled)
		}
		if status, _ := chat("own.example", "llama-3-8b"); status != http.StatusOK {
			t.Errorf("a request beside the stalled ones: %d, want 200", status)
		}
	})

	t.Run("the route status matches what is served", func(t *testing.T) {
		// The status controller is tested in its own package; here only the table the
		// gateway serves from is checked for the foreign ExtensionRef.
		found := false
		for _, rs := range g.Table().Routes() {
			if rs.Route.Name != "foreign-extension" {
				continue
			}
			found = true
			if rs.InvalidRules != 1 || rs.ResolvedRefs != gatewayv1.RouteReasonInvalidKind {
				t.Errorf("foreign-extension status facts = %+v, want one invalid rule and ResolvedRefs InvalidKind", rs)
			}
		}
		if !found {
			t.Error("the table has no status facts for route foreign-extension")
		}
	})
}
