package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/gateway/routetable"
	"github.com/switchboard-llm/switchboard/internal/scheme"
)

// cluster is a real kube-apiserver and etcd (envtest, from bin/k8s through
// KUBEBUILDER_ASSETS) with Switchboard's and the Gateway API's CRDs.
type cluster struct {
	client.Client
	env *envtest.Environment
}

// startCluster starts a control plane that stops when the test ends.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	env := &envtest.Environment{
		CRDDirectoryPaths: []string{
			filepath.Join("..", "..", "config", "crd", "bases"),
			filepath.Join("..", "..", "config", "crd", "gateway-api"),
		},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest (run through make test, which sets KUBEBUILDER_ASSETS): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	k, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{Client: k, env: env}
}

// create creates every object.
func (c *cluster) create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// engineSimBinary is the engine-sim binary TestMain builds for the engine processes.
var engineSimBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gateway-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	engineSimBinary = filepath.Join(dir, "engine-sim")
	if out, err := exec.Command("go", "build", "-o", engineSimBinary, "../../cmd/engine-sim").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build engine-sim: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// engine is an engine-sim process serving on a loopback address of its own.
type engine struct {
	host string
	port int
}

// startEngine runs an engine-sim process for model on host (a 127.0.0.x address) with
// the extra flags, until the test ends, and waits until it answers /health.
func startEngine(t testing.TB, host, model string, flags ...string) *engine {
	t.Helper()
	e := &engine{host: host, port: int(freePortOn(t, host))}
	args := append([]string{"--listen", e.address(), "--model", model}, flags...)
	cmd := exec.Command(engineSimBinary, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start engine-sim: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitUntil(t, "engine-sim on "+e.address()+" is healthy", func() bool {
		resp, err := http.Get("http://" + e.address() + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return e
}

// address returns the engine's host:port.
func (e *engine) address() string { return net.JoinHostPort(e.host, strconv.Itoa(e.port)) }

// enginePod registers a Pod for an engine serving model at host:port, labelled with
// labels, and marks it Running and Ready.
func (c *cluster) enginePod(t testing.TB, ns, name, model, host string, port int, labels map[string]string) *corev1.Pod {
	t.Helper()
	all := map[string]string{v1alpha1.LabelModel: model, v1alpha1.LabelPort: strconv.Itoa(port)}
	for k, v := range labels {
		all[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: all},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine-sim"}}},
	}
	c.create(t, pod)
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      host,
		PodIPs:     []corev1.PodIP{{IP: host}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if err := c.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("update status of pod %s: %v", name, err)
	}
	return pod
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int32 { return freePortOn(t, "127.0.0.1") }

// freePortOn returns a TCP port of host that was free a moment ago.
func freePortOn(t testing.TB, host string) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// gatewayObjects returns a GatewayClass of Switchboard's controller and a Gateway "gw"
// in ns with one HTTP listener on port.
func gatewayObjects(ns string, port int32) (*gatewayv1.GatewayClass, *gatewayv1.Gateway) {
	class := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "switchboard-" + ns},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: routetable.ControllerName},
	}
	gw := &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gatewayv1.GatewaySpec{
			GatewayClassName: gatewayv1.ObjectName(class.Name),
			Listeners: []gatewayv1.Listener{{
				Name: "http", Port: gatewayv1.PortNumber(port), Protocol: gatewayv1.HTTPProtocolType,
			}},
		},
	}
	return class, gw
}

// runGateway starts a manager with the gateway's cache context and the gateway's
// listeners on 127.0.0.1, and waits until the cache is synced. The gateway stops when
// the test ends.
func (c *cluster) runGateway(t testing.TB, opts gateway.Options) (*gateway.Gateway, *cache.Gateway) {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(c.env.Config, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	view, err := cache.InitForGateway(mgr, cache.Options{Scrape: cache.ScrapeOptions{Interval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(view, opts)
	if err := mgr.Add(g.Listeners(gateway.ListenerOptions{Host: "127.0.0.1", SyncInterval: 50 * time.Millisecond})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("manager: %v", err)
		}
	})
	waitCtx, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	if err := view.WaitForSync(waitCtx); err != nil {
		t.Fatal(err)
	}
	return g, view
}

// waitUntil polls cond every 20ms and fails the test if it does not hold within 15s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
