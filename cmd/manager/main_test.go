package main

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestManagerBinary runs the manager and an engine-sim process against a real API
// server, configures a route with a policy and a LoRA adapter, and reads the result the
// way an operator does: with the real kubectl.
func TestManagerBinary(t *testing.T) {
	c := testenv.Start(t)
	kubeconfig := c.Kubeconfig(t, "manager")
	const ns = "demo"

	engineAddr := testenv.FreeAddr(t, "127.0.0.9")
	testenv.Run(t, testenv.Build(t, "engine-sim"), "--listen", engineAddr, "--model", "llama-3-8b", "--lora-load-time", "10ms")
	host, port, _ := net.SplitHostPort(engineAddr)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama-0", Labels: map[string]string{
			v1alpha1.LabelModel: "llama-3-8b", v1alpha1.LabelPort: port, "app": "llama",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine-sim"}}},
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "switchboard-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		pod,
		testenv.EngineService(ns, "llama", map[string]string{"app": "llama"}),
		&gatewayv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: "switchboard"},
			Spec:       gatewayv1.GatewayClassSpec{ControllerName: "switchboard.dev/gateway-controller"},
		},
		&gatewayv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
			Spec: gatewayv1.GatewaySpec{GatewayClassName: "switchboard", Listeners: []gatewayv1.Listener{{
				Name: "http", Port: 8080, Protocol: gatewayv1.HTTPProtocolType,
			}}},
		},
		&gatewayv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama"},
			Spec: gatewayv1.HTTPRouteSpec{
				CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
				Rules: []gatewayv1.HTTPRouteRule{{
					Filters: []gatewayv1.HTTPRouteFilter{{
						Type: gatewayv1.HTTPRouteFilterExtensionRef,
						ExtensionRef: &gatewayv1.LocalObjectReference{
							Group: gatewayv1.Group(v1alpha1.GroupVersion.Group), Kind: "RoutingPolicy", Name: "prefix-cache",
						},
					}},
					BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
						BackendObjectReference: gatewayv1.BackendObjectReference{Name: "llama", Port: new(gatewayv1.PortNumber(8000))},
					}}},
				}},
			},
		},
		&v1alpha1.RoutingPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prefix-cache"},
			Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyPrefixCache},
		},
		&v1alpha1.ModelAdapter{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama-3-8b-sql-lora"},
			Spec: v1alpha1.ModelAdapterSpec{
				BaseModel:   "llama-3-8b",
				ArtifactURL: "file:///adapters/sql-lora",
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llama"}},
			},
		},
	} {
		c.Create(t, obj)
	}
	c.SetPodReady(t, pod, host, true)

	manager := testenv.Run(t, testenv.Build(t, "manager"), "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", testenv.FreeAddr(t, "127.0.0.1"))

	kubectl := func(args ...string) string {
		out, err := exec.Command(testenv.Kubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var table, routes string
	testenv.WaitUntil(t, time.Minute, "kubectl shows the policy and the adapter ready", func() bool {
		table = kubectl("get", "rp,ma", "-n", ns)
		return rowHas(table, "prefix-cache", "prefix-cache", "1", "1", "True") &&
			rowHas(table, "llama-3-8b-sql-lora", "llama-3-8b", "1", "1", "Loaded")
	})
	t.Logf("$ kubectl get rp,ma -n %s\n%s", ns, table)
	// The Gateway's status is written by a controller of its own, which may come later.
	testenv.WaitUntil(t, time.Minute, "kubectl shows the GatewayClass accepted and the Gateway programmed", func() bool {
		routes = kubectl("get", "gatewayclass,gateway,httproute", "-n", ns)
		return rowHas(routes, "gatewayclass.gateway.networking.k8s.io/switchboard", "switchboard.dev/gateway-controller", "True") &&
			rowHas(routes, "gateway.gateway.networking.k8s.io/gw", "switchboard", "True")
	})
	t.Logf("$ kubectl get gatewayclass,gateway,httproute -n %s\n%s", ns, routes)

	if err := manager.Stop(t, 30*time.Second); err != nil {
		t.Errorf("manager exited with %v after SIGTERM, want success", err)
	}
}

// rowHas reports whether a line of table starts with name and contains every field in
// order.
func rowHas(table, name string, fields ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		cols := strings.Fields(line)
		if len(cols) == 0 || !strings.HasSuffix(cols[0], name) {
			continue
		}
		next := 1
		for _, f := range fields {
			for next < len(cols) && cols[next] != f {
				next++
			}
			if next == len(cols) {
				return false
			}
			next++
		}
		return true
	}
	return false
}
