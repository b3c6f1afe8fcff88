package cache

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestInformersFeedCache runs the gateway and manager cache contexts against a real
// kube-apiserver and etcd (envtest, binaries from bin/k8s via KUBEBUILDER_ASSETS) and an
// in-process engine simulator serving /metrics on loopback.
func TestInformersFeedCache(t *testing.T) {
	c := testenv.Start(t)
	ctx := context.Background()
	// The engine serves the pods' base model, so that its model listings are accepted.
	engineCfg := enginesim.DefaultConfig()
	engineCfg.Model, engineCfg.LoRALoadTime = "llama", 0
	engine, engineAddr := testenv.InProcessEngine(t, "127.0.0.1", engineCfg)
	engineHost, enginePort, err := net.SplitHostPort(engineAddr)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "cache-it"
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})

	// A pod that exists before the caches start is in them as soon as they report synced.
	c.EnginePod(t, ns, "early", "llama", engineAddr, map[string]string{"app": "llama"})

	// Every goroutine the caches start must end when their managers stop. The managers
	// stop in cleanups registered after this one, so they run before it.
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks, metadataWatchLeak) })
	var (
		gw      *Gateway
		mgrView *Manager
	)
	c.RunManager(t, func(mgr ctrl.Manager) (err error) {
		gw, err = InitForGateway(mgr, Options{Scrape: ScrapeOptions{Interval: 20 * time.Millisecond, ModelsRefreshInterval: modelsRefresh}})
		return err
	})
	c.RunManager(t, func(mgr ctrl.Manager) (err error) {
		mgrView, err = InitForManager(mgr)
		return err
	})
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
		c.Create(t, p2)
		waitUntil(t, "p2 is known but not routable", func() bool {
			p, ok := gw.Pod(endpoint.Key{Namespace: ns, Name: "p2"})
			return ok && !p.Routable()
		})
		c.SetPodReady(t, p2, engineHost, true)
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

		c.SetPodReady(t, p2, engineHost, false)
		waitUntil(t, "p2 stops serving llama when not ready", func() bool {
			return slices.Equal(podNames(gw.Reader, "llama"), []string{"early"})
		})
		c.SetPodReady(t, p2, engineHost, true)
		waitUntil(t, "p2 serves llama again", func() bool {
			return slices.Equal(podNames(gw.Reader, "llama"), []string{"early", "p2"})
		})

		patchLabels(t, c.Client, p2, map[string]string{v1alpha1.LabelModel: "mistral"})
		waitUntil(t, "relabelled p2 serves mistral only", func() bool {
			return slices.Equal(podNames(gw.Reader, "llama"), []string{"early"}) &&
				slices.Equal(podNames(gw.Reader, "mistral"), []string{"p2"})
		})

		if err := c.Delete(ctx, p2); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "deleted p2 leaves the cache and mistral disappears", func() bool {
			_, ok := gw.Pod(endpoint.Key{Namespace: ns, Name: "p2"})
			_, served := gw.Model("mistral")
			return !ok && !served
		})
	})

	t.Run("adapters", func(t *testing.T) {
		// As the ModelAdapter controller would, load the adapter before naming instances.
		if err := engine.LoadAdapter(ctx, "sql-lora", "/adapters/sql-lora"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = engine.UnloadAdapter("sql-lora") })
		ma := &v1alpha1.ModelAdapter{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sql-lora"},
			Spec: v1alpha1.ModelAdapterSpec{
				BaseModel:   "llama",
				ArtifactURL: "file:///adapters/sql-lora",
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llama"}},
			},
		}
		c.Create(t, ma)
		ma.Status.Instances = []string{"early"}
		if err := c.Status().Update(ctx, ma); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the adapter is served by its instance", func() bool {
			m, ok := gw.Model("sql-lora")
			return ok && m.BaseModel == "llama" && slices.Equal(podNames(gw.Reader, "sql-lora"), []string{"early"})
		})
		// The manager lists no engines: placement alone decides there.
		waitUntil(t, "the manager serves the adapter from placement", func() bool {
			return slices.Equal(podNames(mgrView.Reader, "sql-lora"), []string{"early"})
		})

		// The engine unloads the adapter behind the manager's back: the gateway stops
		// routing it there although status.instances still names the pod.
		if err := engine.UnloadAdapter("sql-lora"); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the unloaded adapter disappears from the gateway", func() bool {
			_, ok := gw.Model("sql-lora")
			return !ok
		})
		if got := podNames(mgrView.Reader, "sql-lora"); !slices.Equal(got, []string{"early"}) {
			t.Errorf("manager: endpoints of sql-lora = %v, want [early] from placement", got)
		}
		ma.Status.Instances = nil
		if err := c.Status().Update(ctx, ma); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the adapter disappears from the manager with its last instance", func() bool {
			_, ok := mgrView.Model("sql-lora")
			return !ok
		})
	})

	t.Run("engine listings", func(t *testing.T) {
		// An engine of its own, and no ModelAdapter: the engine alone says what it serves.
		cfg := enginesim.DefaultConfig()
		cfg.LoRALoadTime = 0
		_, addr := testenv.InProcessEngine(t, "127.0.0.1", cfg)
		c.EnginePod(t, ns, "listed", cfg.Model, addr, nil)
		waitUntil(t, "the pod serves its base model", func() bool {
			return slices.Equal(podNames(gw.Reader, cfg.Model), []string{"listed"})
		})

		admin := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
		t.Cleanup(admin.CloseIdleConnections)
		post := func(path, body string) {
			t.Helper()
			resp, err := admin.Post("http://"+addr+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				msg, _ := io.ReadAll(resp.Body)
				t.Fatalf("POST %s: %s: %s", path, resp.Status, msg)
			}
		}
		post("/v1/load_lora_adapter", `{"lora_name":"engine-lora","lora_path":"/adapters/engine-lora"}`)
		waitUntil(t, "the adapter loaded on the engine becomes a routable model", func() bool {
			m, ok := gw.Model("engine-lora")
			return ok && m.IsAdapter() && m.BaseModel == cfg.Model &&
				slices.Equal(podNames(gw.Reader, "engine-lora"), []string{"listed"})
		})
		if p, _ := gw.Pod(endpoint.Key{Namespace: ns, Name: "listed"}); !slices.Equal(p.Adapters, []string{"engine-lora"}) {
			t.Errorf("Adapters of the pod = %v, want [engine-lora]", p.Adapters)
		}
		if _, ok := mgrView.Model("engine-lora"); ok {
			t.Error("the manager context, which lists no engines, serves engine-lora")
		}

		post("/v1/unload_lora_adapter", `{"lora_name":"engine-lora"}`)
		waitUntil(t, "the unloaded adapter leaves the pod", func() bool {
			p, _ := gw.Pod(endpoint.Key{Namespace: ns, Name: "listed"})
			_, ok := gw.Model("engine-lora")
			return !ok && len(p.Adapters) == 0
		})
		// That it leaves within one listing, counted in listings rather than time, is
		// TestScraperListsModels's assertion.
		if st := gw.ScrapeStats(); st.ListingsSucceeded == 0 || st.ListingsUnauthorized != 0 {
			t.Errorf("ScrapeStats() = %+v, want listings and none refused", st)
		}
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
		c.Create(t, svc, policy, class, gateway, route)
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
		if err := c.Delete(ctx, policy); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the deleted policy leaves the store", func() bool {
			_, ok := gw.Policies.Get(types.NamespacedName{Namespace: ns, Name: "rp"})
			return !ok
		})
	})

}

// modelsRefresh is the gateway context's ModelsRefreshInterval in TestInformersFeedCache.
const modelsRefresh = 300 * time.Millisecond

// engineDeployment returns an engine pod serving llama on port, before any status.
func engineDeployment(ns, name, port string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{
				v1alpha1.LabelModel: "llama",
				v1alpha1.LabelPort:  port,
				"app":               "llama",
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine-sim"}}},
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

// podNames returns the names of the endpoints of model in r, in order.
func podNames(r Reader, model string) []string {
	var names []string
	for _, p := range r.ListEndpoints(model) {
		names = append(names, p.Key.Name)
	}
	return names
}
