package gateway_test

import (
	"net"
	"net/http"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
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
	c.Create(t, class, gw, rr, pool("llm", "rr"), pool("orphan", ""),
		route("llm", "llm.example", "llm"), route("orphan", "orphan.example", "orphan"))
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
