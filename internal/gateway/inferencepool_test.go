package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/extproc"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestInferencePoolBackend serves an HTTPRoute whose backendRef is an InferencePool: the
// requests go only to the pool's pods, on its target port, routed by the RoutingPolicy
// the pool's annotation names; a pool whose policy does not exist answers 500. The
// ext_proc picker scoped to the pool picks the same way.
func TestInferencePoolBackend(t *testing.T) {
	const pns = "pool-test"
	c := testenv.Start(t)
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pns}})

	// Every engine listens on one port, as the pods of a pool do.
	first := testenv.EngineProcess(t, "127.0.0.28", "llama-3-8b")
	_, port, _ := net.SplitHostPort(first)
	second := testenv.EngineProcessAt(t, net.JoinHostPort("127.0.0.29", port), "llama-3-8b")
	outsider := testenv.EngineProcessAt(t, net.JoinHostPort("127.0.0.30", port), "llama-3-8b")
	c.EnginePod(t, pns, "pool-0", "llama-3-8b", first, map[string]string{"app": "pool"})
	c.EnginePod(t, pns, "pool-1", "llama-3-8b", second, map[string]string{"app": "pool"})
	c.EnginePod(t, pns, "outsider", "llama-3-8b", outsider, map[string]string{"app": "other"})

	portNumber, _ := strconv.Atoi(port)
	pool := func(name, policy string) *inferencev1.InferencePool {
		p := &inferencev1.InferencePool{
			ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: name},
			Spec: inferencev1.InferencePoolSpec{
				Selector:    inferencev1.LabelSelector{MatchLabels: map[inferencev1.LabelKey]inferencev1.LabelValue{"app": "pool"}},
				TargetPorts: []inferencev1.Port{{Number: inferencev1.PortNumber(portNumber)}},
			},
		}
		if policy != "" {
			p.Annotations = map[string]string{routetable.PoolPolicyAnnotation: policy}
		}
		return p
	}
	route := func(name, host, poolName string) *gatewayv1.HTTPRoute {
		return &gatewayv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: name},
			Spec: gatewayv1.HTTPRouteSpec{
				CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
				Hostnames:       []gatewayv1.Hostname{gatewayv1.Hostname(host)},
				Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{
						Group: new(gatewayv1.Group(routetable.PoolGroup)), Kind: new(gatewayv1.Kind(routetable.PoolKind)),
						Name: gatewayv1.ObjectName(poolName),
					},
				}}}}},
			},
		}
	}
	listener := testenv.FreeAddr(t, "127.0.0.1")
	class, gw := gatewayObjects(t, pns, listener)
	rr := &v1alpha1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: "rr"},
		Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyRoundRobin},
	}
	unpicked := pool("unpicked", "rr") // its endpoint picker's Service does not exist
	unpicked.Spec.EndpointPickerRef = &inferencev1.EndpointPickerRef{Name: "no-such-epp", Port: &inferencev1.Port{Number: 9002}}
	c.Create(t, class, gw, rr, pool("llm", "rr"), pool("orphan", ""), unpicked,
		route("llm", "llm.example", "llm"), route("orphan", "orphan.example", "orphan"), route("unpicked", "unpicked.example", "unpicked"))
	g, _ := runGateway(t, c, gateway.Options{})
	base := "http://" + listener

	testenv.WaitUntil(t, waitTimeout, "the gateway serves the pool", func() bool {
		status, _ := post(base, "llm.example", chatBody("llama-3-8b", false))
		return status == http.StatusOK
	})
	seen := map[string]int{}
	for range 20 {
		status, hdr := post(base, "llm.example", chatBody("llama-3-8b", false))
		if status != http.StatusOK {
			t.Fatalf("request to the pool answered %d", status)
		}
		seen[hdr.Get(gateway.HeaderEndpoint)]++
	}
	// Round-robin alternates between the pool's two pods; the third never gets one.
	if seen[pns+"/pool-0"] != 10 || seen[pns+"/pool-1"] != 10 || len(seen) != 2 {
		t.Errorf("endpoints = %v, want 10 each on pool-0 and pool-1, none elsewhere", seen)
	}

	status, _, body := postRead(base, "orphan.example", chatBody("llama-3-8b", false))
	if status != http.StatusInternalServerError {
		t.Errorf("a pool without its RoutingPolicy answered %d %s, want 500", status, body)
	}
	if status, _, body := postRead(base, "unpicked.example", chatBody("llama-3-8b", false)); status != http.StatusInternalServerError {
		t.Errorf("a pool whose endpointPickerRef does not resolve answered %d %s, want 500", status, body)
	}

	t.Run("as the pool's endpoint picker", func(t *testing.T) {
		picked := map[string]int{}
		for range 10 {
			dest, _, done := pickOverExtProc(t, g, gateway.PickScope{Pool: &types.NamespacedName{Namespace: pns, Name: "llm"}}, chatBody("llama-3-8b", false))
			picked[dest]++
			done()
		}
		// The pool's round-robin policy alternates between its two pods.
		if picked[first] != 5 || picked[second] != 5 || len(picked) != 2 {
			t.Errorf("picked %v, want 5 each of %s and %s", picked, first, second)
		}
		_, status, done := pickOverExtProc(t, g, gateway.PickScope{Pool: &types.NamespacedName{Namespace: pns, Name: "orphan"}}, chatBody("llama-3-8b", false))
		done()
		if status != http.StatusInternalServerError {
			t.Errorf("picking for a pool without its RoutingPolicy answered %d, want 500", status)
		}
	})
}

// TestInferencePoolRanks serves an InferencePool with two targetPorts over two pods that
// each run an engine on both (data-parallel ranks, each its own engine-sim process): every
// rank is an endpoint of its own. Round-robin reaches the four equally, through a route
// and as the pool's picker; least-kv-cache, which reads each endpoint's scraped metrics,
// avoids the one rank whose engine has a queue; a Service selecting the same pods keeps
// one endpoint per pod, on its own engine port.
func TestInferencePoolRanks(t *testing.T) {
	const pns, model = "ranks-test", "llama-3-8b"
	c := testenv.Start(t)
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pns}})

	// Each pod's own engine port (its switchboard.dev/port label) is the pool's first
	// targetPort, a; the second, b, is a rank of its own.
	hosts := []string{"127.0.0.33", "127.0.0.34"}
	own := testenv.EngineProcess(t, hosts[0], model)
	_, a, _ := net.SplitHostPort(own)
	_, b, _ := net.SplitHostPort(testenv.FreeAddr(t, hosts[0]))
	var ranks []string // pod-0 on a and b, then pod-1 on a and b
	for i, host := range hosts {
		if i > 0 {
			own = testenv.EngineProcessAt(t, net.JoinHostPort(host, a), model)
		}
		// The last rank takes one request at a time, for the test to queue on it.
		ranks = append(ranks, own, testenv.EngineProcessAt(t, net.JoinHostPort(host, b), model, "--max-num-seqs", "1"))
		c.EnginePod(t, pns, "pod-"+strconv.Itoa(i), model, own, map[string]string{"app": "ranks"})
	}
	headers := map[string]string{ // the x-switchboard-endpoint of each rank
		ranks[0]: pns + "/pod-0", ranks[1]: pns + "/pod-0:" + b,
		ranks[2]: pns + "/pod-1", ranks[3]: pns + "/pod-1:" + b,
	}
	portA, _ := strconv.Atoi(a)
	portB, _ := strconv.Atoi(b)
	pool := func(name, policy string) *inferencev1.InferencePool {
		return &inferencev1.InferencePool{
			ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: name, Annotations: map[string]string{routetable.PoolPolicyAnnotation: policy}},
			Spec: inferencev1.InferencePoolSpec{
				Selector:    inferencev1.LabelSelector{MatchLabels: map[inferencev1.LabelKey]inferencev1.LabelValue{"app": "ranks"}},
				TargetPorts: []inferencev1.Port{{Number: inferencev1.PortNumber(portA)}, {Number: inferencev1.PortNumber(portB)}},
			},
		}
	}
	poolRoute := func(name string) *gatewayv1.HTTPRoute {
		return &gatewayv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: name},
			Spec: gatewayv1.HTTPRouteSpec{
				CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
				Hostnames:       []gatewayv1.Hostname{gatewayv1.Hostname(name + ".example")},
				Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{
						Group: new(gatewayv1.Group(routetable.PoolGroup)), Kind: new(gatewayv1.Kind(routetable.PoolKind)),
						Name: gatewayv1.ObjectName(name),
					},
				}}}}},
			},
		}
	}
	// A route through an ordinary Service of the same pods, under the round-robin policy.
	svcRoute := httpRoute("service", []gatewayv1.Hostname{"service.example"}, "rr")
	svcRoute.Namespace = pns
	listener := testenv.FreeAddr(t, "127.0.0.1")
	class, gw := gatewayObjects(t, pns, listener)
	c.Create(t, class, gw,
		&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: "rr"},
			Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyRoundRobin}},
		&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: "kv"},
			Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastKVCache}},
		&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: "sticky"},
			Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategySessionAffinity}},
		&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: "pc"},
			Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyPrefixCache}},
		pool("rr", "rr"), pool("kv", "kv"), pool("sticky", "sticky"), pool("pc", "pc"), poolRoute("rr"), poolRoute("kv"),
		testenv.EngineService(pns, "llama", map[string]string{"app": "ranks"}), svcRoute)
	g, view := runGateway(t, c, gateway.Options{})
	base := "http://" + listener

	endpoints := func() int { // the test's endpoints in the cache
		m, ok := view.Model(model)
		if !ok {
			return 0
		}
		return m.PodSet().Filter(func(p *cache.Pod) bool { return p.Key.Namespace == pns }).Len()
	}
	testenv.WaitUntil(t, waitTimeout, "the cache holds the two pods and their two ranks on b", func() bool { return endpoints() == 4 })
	for _, host := range []string{"rr.example", "kv.example", "service.example"} {
		testenv.WaitUntil(t, waitTimeout, "the gateway serves "+host, func() bool {
			status, _ := post(base, host, chatBody(model, false))
			return status == http.StatusOK
		})
	}
	send := func(t *testing.T, host string, n int) map[string]int {
		t.Helper()
		seen := map[string]int{}
		for range n {
			status, hdr := post(base, host, chatBody(model, false))
			if status != http.StatusOK {
				t.Fatalf("request to %s answered %d", host, status)
			}
			seen[hdr.Get(gateway.HeaderEndpoint)]++
		}
		return seen
	}

	t.Run("round-robin reaches every rank", func(t *testing.T) {
		seen := send(t, "rr.example", 40)
		for _, r := range ranks {
			if seen[headers[r]] != 10 {
				t.Errorf("endpoints = %v, want 10 on each of %v", seen, headers)
				break
			}
		}
	})

	t.Run("a Service keeps one endpoint per pod", func(t *testing.T) {
		seen := send(t, "service.example", 20)
		if seen[pns+"/pod-0"] != 10 || seen[pns+"/pod-1"] != 10 || len(seen) != 2 {
			t.Errorf("endpoints = %v, want 10 each on pod-0 and pod-1, on their own engine port", seen)
		}
	})

	t.Run("as the pool's endpoint picker, each rank on its own port", func(t *testing.T) {
		picked := map[string]int{}
		for range 20 {
			dest, _, done := pickOverExtProc(t, g, gateway.PickScope{Pool: &types.NamespacedName{Namespace: pns, Name: "rr"}}, chatBody(model, false))
			picked[dest]++
			done()
		}
		for _, r := range ranks {
			if picked[r] != 5 {
				t.Errorf("picked %v, want 5 of each of %v", picked, ranks)
				break
			}
		}
	})

	t.Run("the picker's subset names ranks, and a fallback rank that served is learnt", func(t *testing.T) {
		picker := g.Picker(gateway.PickScope{Pool: &types.NamespacedName{Namespace: pns, Name: "sticky"}})
		headers := http.Header{":path": {"/v1/chat/completions"}, "Content-Type": {"application/json"}, "X-Session-Id": {"s"}}
		pick := func(subset ...string) extproc.Pick {
			t.Helper()
			req := extproc.Request{Headers: headers, Body: chatBody(model, false)}
			if subset != nil {
				req.Subset = map[string]bool{}
				for _, e := range subset {
					req.Subset[e] = true
				}
			}
			p, err := picker.Pick(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		p := pick(ranks[1])
		p.Reservation.Release()
		if !slices.Equal(p.Endpoints, []string{ranks[1]}) {
			t.Errorf("endpoints for the subset {%s} = %v, want exactly that rank", ranks[1], p.Endpoints)
		}

		// The session's pick, within one pod's ranks: the other rank is the fallback.
		p = pick(ranks[0], ranks[1])
		if len(p.Endpoints) != 2 {
			t.Fatalf("endpoints for the subset of pod-0's ranks = %v, want both", p.Endpoints)
		}
		p.Reservation.Served(p.Endpoints[1])
		p.Reservation.Release()
		next := pick()
		next.Reservation.Release()
		if next.Endpoints[0] != p.Endpoints[1] {
			t.Errorf("the session's next pick = %v, want %s first, which served the last (picked: %s)", next.Endpoints, p.Endpoints[1], p.Endpoints[0])
		}
	})

	// The picker learns the pool's policy before it parses the body, and builds the
	// prompt's text for prefix-cache, which reads it.
	t.Run("as a prefix-cache pool's endpoint picker, a conversation stays on its rank", func(t *testing.T) {
		picker := g.Picker(gateway.PickScope{Pool: &types.NamespacedName{Namespace: pns, Name: "pc"}})
		pick := func(prompt string) string {
			t.Helper()
			body, err := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": prompt}}})
			if err != nil {
				t.Fatal(err)
			}
			p, err := picker.Pick(context.Background(), extproc.Request{
				Headers: http.Header{":path": {"/v1/chat/completions"}, "Content-Type": {"application/json"}}, Body: body})
			if err != nil {
				t.Fatal(err)
			}
			p.Reservation.Release()
			return p.Endpoints[0]
		}
		for i := range 6 {
			prompt := strings.Repeat(fmt.Sprintf("Conversation %d goes on at some length. ", i), 40)
			first := pick(prompt)
			if next := pick(prompt + "And a follow-up question."); next != first {
				t.Errorf("conversation %d: picked %s, then %s for its next turn; want the same rank", i, first, next)
			}
		}
	})

	t.Run("a rank with a queue is avoided by its metrics", func(t *testing.T) {
		busy := ranks[3]
		// Two long requests straight to the rank's engine: one runs, one waits.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		long := []byte(`{"model":"llama-3-8b","max_tokens":100000,"messages":[{"role":"user","content":"` + strings.Repeat("tell me more ", 100) + `"}]}`)
		for range 2 {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+busy+"/v1/chat/completions", bytes.NewReader(long))
			req.Header.Set("Content-Type", "application/json")
			go func() {
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
		testenv.WaitUntil(t, waitTimeout, "the scraped metrics of "+busy+" show a queue, and only its", func() bool {
			var queued []string
			for _, p := range view.NamespacePods(pns) {
				if m := p.Metrics(); m != nil && m.Waiting > 0 {
					queued = append(queued, net.JoinHostPort(p.Address, strconv.Itoa(int(p.Port))))
				}
			}
			return slices.Equal(queued, []string{busy})
		})
		if seen := send(t, "kv.example", 20); seen[headers[busy]] != 0 || len(seen) != 3 {
			t.Errorf("least-kv-cache endpoints = %v, want the three idle ranks and none on %s", seen, headers[busy])
		}
	})
}
