package cache

import (
	"context"
	"net"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

// TestInformersFeedCache runs the gateway and manager cache contexts against a real
// kube-apiserver and etcd (envtest, binaries from bin/k8s via KUBEBUILDER_ASSETS) and an
// in-process engine simulator serving /metrics on loopback.
func TestInformersFeedCache(t *testing.T) {
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
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	scheme := testScheme(t)
	if err := gatewayv1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	k, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	engineHost, enginePort := startEngine(t)
	const ns = "cache-it"
	mustCreate(t, k, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})

	// A pod that exists before the caches start is in them as soon as they report synced.
	early := engineDeployment(ns, "early", enginePort)
	mustCreate(t, k, early)
	setPodStatus(t, k, early, engineHost, true)

	// Every goroutine the caches start must end when their managers stop.
	leaks := goleak.IgnoreCurrent()
	gw, stopGateway := startManager(t, cfg, scheme, func(mgr ctrl.Manager) (*Gateway, error) {
		return InitForGateway(mgr, Options{Scrape: ScrapeOptions{Interval: 20 * time.Millisecond}})
	})
	mgrView, stopManager := startManager(t, cfg, scheme, InitForManager)
	for _, s := range []Sync{gw.Sync, mgrView.Sync} {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := s.WaitForSync(waitCtx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, r := range map[string]Reader{"gateway": gw.Reader, "manager": mgrView.Reader} {
		if got := podNames(r, "llama"); !slices.Equal(got, []string{"early"}) {
			t.Fatalf("%s cache right after sync: endpoints of llama = %v, want [early]", name, got)
		}
	}

	t.Run("pods", func(t *testing.T) {
		p2 := engineDeployment(ns, "p2", enginePort)
		mustCreate(t, k, p2)
		waitUntil(t, "p2 is known but not routable", func() bool {
			p, ok := gw.Pod(endpoint.Key{Namespace: ns, Name: "p2"})
			return ok && !p.Routable()
		})
		setPodStatus(t, k, p2, engineHost, true)
		waitUntil(t, "p2 serves llama in both caches", func() bool {
			return slices.Equal(podNames(gw.Reader, "llama"), []string{"early", "p2"}) &&
				slices.Equal(podNames(mgrView.Reader, "llama"), []string{"early", "p2"})
		})
		waitUntil(t, "p2's engine metrics are scraped", func() bool {
			p, _ := gw.Pod(endpoint.Key{Namespace: ns, Name: "p2"})
			m := p.FreshMetrics(time.Now(), gw.StaleAfter())
			return m != nil && m.NumGPUBlocks == enginesim.DefaultConfig().KVBlocks
		})
		if p, _ := mgrView.Pod(endpoint.Key{Namespace: ns, Name: "p2"}); p.Metrics() != nil {
			t.Error("the manager context scraped metrics; it must not")
		}

		setPodStatus(t, k, p2, engineHost, false)
		waitUntil(t, "p2 stops serving llama when not ready", func() bool {
			return slices.Equal(podNames(gw.Reader, "llama"), []string{"early"})
		})
		setPodStatus(t, k, p2, engineHost, true)
		waitUntil(t, "p2 serves llama again", func() bool {
			return slices.Equal(podNames(gw.Reader, "llama"), []string{"early", "p2"})
		})

		patchLabels(t, k, p2, map[string]string{v1alpha1.LabelModel: "mistral"})
		waitUntil(t, "relabelled p2 serves mistral only", func() bool {
			return slices.Equal(podNames(gw.Reader, "llama"), []string{"early"}) &&
				slices.Equal(podNames(gw.Reader, "mistral"), []string{"p2"})
		})

		if err := k.Delete(ctx, p2); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "deleted p2 leaves the cache and mistral disappears", func() bool {
			_, ok := gw.Pod(endpoint.Key{Namespace: ns, Name: "p2"})
			_, served := gw.Model("mistral")
			return !ok && !served
		})
	})

	t.Run("adapters", func(t *testing.T) {
		ma := &v1alpha1.ModelAdapter{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sql-lora"},
			Spec: v1alpha1.ModelAdapterSpec{
				BaseModel:   "llama",
				ArtifactURL: "file:///adapters/sql-lora",
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llama"}},
			},
		}
		mustCreate(t, k, ma)
		ma.Status.Instances = []string{"early"}
		if err := k.Status().Update(ctx, ma); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the adapter is served by its instance", func() bool {
			m, ok := gw.Model("sql-lora")
			return ok && m.BaseModel == "llama" && slices.Equal(podNames(gw.Reader, "sql-lora"), []string{"early"})
		})
		ma.Status.Instances = nil
		if err := k.Status().Update(ctx, ma); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the adapter disappears with its last instance", func() bool {
			_, ok := gw.Model("sql-lora")
			return !ok
		})
	})

	t.Run("gateway objects", func(t *testing.T) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "llama"},
				Ports:    []corev1.ServicePort{{Port: 8000}},
			},
		}
		policy := &v1alpha1.RoutingPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rp"},
			Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest},
		}
		class := &gatewayv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: "switchboard"},
			Spec:       gatewayv1.GatewayClassSpec{ControllerName: "switchboard.dev/gateway-controller"},
		}
		gateway := &gatewayv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
			Spec: gatewayv1.GatewaySpec{
				GatewayClassName: "switchboard",
				Listeners:        []gatewayv1.Listener{{Name: "http", Port: 8080, Protocol: gatewayv1.HTTPProtocolType}},
			},
		}
		route := &gatewayv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama"},
			Spec: gatewayv1.HTTPRouteSpec{
				CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
				Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{
					BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
						Name: "llama", Port: new(gatewayv1.PortNumber(8000)),
					}},
				}}}},
			},
		}
		for _, obj := range []client.Object{svc, policy, class, gateway, route} {
			mustCreate(t, k, obj)
		}
		waitUntil(t, "the gateway objects are stored", func() bool {
			s, okS := gw.Services.Get(types.NamespacedName{Namespace: ns, Name: "llama"})
			_, okP := gw.Policies.Get(types.NamespacedName{Namespace: ns, Name: "rp"})
			_, okG := gw.Gateways.Get(types.NamespacedName{Namespace: ns, Name: "gw"})
			_, okR := gw.Routes.Get(types.NamespacedName{Namespace: ns, Name: "llama"})
			_, okC := gw.GatewayClasses.Get(types.NamespacedName{Name: "switchboard"})
			return okS && okP && okG && okR && okC && s.Selector["app"] == "llama"
		})
		early, _ := gw.Pod(endpoint.Key{Namespace: ns, Name: "early"})
		if s, _ := gw.Services.Get(types.NamespacedName{Namespace: ns, Name: "llama"}); !s.Selects(early) {
			t.Error("the llama Service does not select the early pod")
		}
		if err := k.Delete(ctx, policy); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the deleted policy leaves the store", func() bool {
			_, ok := gw.Policies.Get(types.NamespacedName{Namespace: ns, Name: "rp"})
			return !ok
		})
	})

	stopGateway()
	stopManager()
	goleak.VerifyNone(t, leaks)
}

// startEngine serves an engine simulator on a loopback port until the test ends and
// returns its host and port.
func startEngine(t *testing.T) (host string, port int) {
	t.Helper()
	engine, err := enginesim.NewEngine(enginesim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(engine.Handler())
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().(*net.TCPAddr)
	return addr.IP.String(), addr.Port
}

// startManager builds a controller manager on cfg, lets initContext wire a cache context
// into it and starts it. stop stops the manager and waits for it to return.
func startManager[V any](t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, initContext func(ctrl.Manager) (V, error)) (view V, stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if view, err = initContext(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(stop)
	return view, stop
}

// engineDeployment returns an engine pod serving llama on port, before any status.
func engineDeployment(ns, name string, port int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{
				v1alpha1.LabelModel: "llama",
				v1alpha1.LabelPort:  strconv.Itoa(port),
				"app":               "llama",
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine-sim"}}},
	}
}

// setPodStatus makes pod Running at ip, with condition Ready set to ready.
func setPodStatus(t *testing.T, k client.Client, pod *corev1.Pod, ip string, ready bool) {
	t.Helper()
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      ip,
		PodIPs:     []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: readyStatus}},
	}
	if err := k.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("update status of pod %s: %v", pod.Name, err)
	}
}

// patchLabels merges labels into pod's labels.
func patchLabels(t *testing.T, k client.Client, pod *corev1.Pod, labels map[string]string) {
	t.Helper()
	patch := client.MergeFrom(pod.DeepCopy())
	for key, v := range labels {
		pod.Labels[key] = v
	}
	if err := k.Patch(context.Background(), pod, patch); err != nil {
		t.Fatalf("patch labels of pod %s: %v", pod.Name, err)
	}
}

// mustCreate creates obj.
func mustCreate(t *testing.T, k client.Client, obj client.Object) {
	t.Helper()
	if err := k.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// podNames returns the names of the endpoints of model in r, in order.
func podNames(r Reader, model string) []string {
	var names []string
	for _, p := range r.ListEndpoints(model) {
		names = append(names, p.Key.Name)
	}
	return names
}
