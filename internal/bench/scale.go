package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
)

// The scale section measures the gateway's memory and idle CPU with many endpoints and
// routes: pods registered as ready engines on addresses where nothing listens (the
// scraper finds them refusing, as a fleet of engines that are down), HTTPRoutes that
// each attach a RoutingPolicy to the Service of all of them, and one gateway reading it
// all.

// ScaleResult is what the scale section measured.
type ScaleResult struct {
	Endpoints int `json:"endpoints"`
	Models    int `json:"models"`
	Routes    int `json:"routes"`
	// SyncSeconds is how long the gateway took from start to ready (its cache synced).
	SyncSeconds float64 `json:"sync_s"`
	// HeapInUseMB and ResidentMB are read from the gateway's own metrics after the window.
	HeapInUseMB float64 `json:"heap_in_use_mb"`
	ResidentMB  float64 `json:"resident_mb"`
	// IdleCores is the gateway's CPU over the window, in cores, with no traffic: the
	// informers and the scraper's attempts on every endpoint.
	IdleCores float64 `json:"idle_cores"`
	// WindowSeconds is the length of that window.
	WindowSeconds float64 `json:"window_s"`
}

// scaleModels is how many models the scale section's endpoints serve, one in ten each.
const scaleModels = 10

// runScale runs the scale section with cfg.ScaleEndpoints pods and cfg.ScaleRoutes routes.
func runScale(ctx context.Context, cfg Config) (*ScaleResult, error) {
	// A control plane of its own, from scratch, so that its objects meet no earlier run's
	// and no other section meets them.
	cfg.StateDir = filepath.Join(cfg.StateDir, "scale")
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, err
	}
	f := &fleet{cfg: cfg}
	defer func() {
		f.down()
		_ = os.RemoveAll(cfg.StateDir)
	}()
	if err := f.startCluster(ctx); err != nil {
		return nil, err
	}
	const ns = "switchboard-scale"
	listener, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, portText, _ := net.SplitHostPort(listener)
	port, _ := strconv.Atoi(portText)
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "switchboard-scale"},
			Spec: gatewayv1.GatewayClassSpec{ControllerName: "switchboard.dev/gateway-controller"}},
		&gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scale"},
			Spec: gatewayv1.GatewaySpec{GatewayClassName: "switchboard-scale",
				Addresses: []gatewayv1.GatewaySpecAddress{{Value: "127.0.0.1"}},
				Listeners: []gatewayv1.Listener{{Name: "http", Port: gatewayv1.PortNumber(port), Protocol: gatewayv1.HTTPProtocolType}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "engines"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "scale-engine"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 8000, TargetPort: intstr.FromInt32(8000)}}}},
		&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "least-request"},
			Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}},
	}
	for _, o := range objs {
		if err := f.createOrUpdate(ctx, o); err != nil {
			return nil, err
		}
	}
	started := time.Now()
	f.logf("scale: registering %d engine pods and %d HTTPRoutes", cfg.ScaleEndpoints, cfg.ScaleRoutes)
	err = parallel(ctx, 32, cfg.ScaleEndpoints, func(ctx context.Context, i int) error { return f.scalePod(ctx, ns, i) })
	if err != nil {
		return nil, err
	}
	err = parallel(ctx, 32, cfg.ScaleRoutes, func(ctx context.Context, i int) error { return f.scaleRoute(ctx, ns, i) })
	if err != nil {
		return nil, err
	}
	f.logf("scale: objects created in %s", time.Since(started).Round(time.Second))

	if f.metricsAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	if f.probeAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	started = time.Now()
	if err := f.startGateway(ctx); err != nil {
		return nil, err
	}
	res := &ScaleResult{Endpoints: cfg.ScaleEndpoints, Models: scaleModels, Routes: cfg.ScaleRoutes,
		SyncSeconds: time.Since(started).Seconds(), WindowSeconds: cfg.ScaleWindow.Seconds()}
	before, err := gatewayMetrics(ctx, f.metricsAddr)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cfg.ScaleWindow):
	}
	after, err := gatewayMetrics(ctx, f.metricsAddr)
	if err != nil {
		return nil, err
	}
	res.IdleCores = (after["process_cpu_seconds_total"] - before["process_cpu_seconds_total"]) / cfg.ScaleWindow.Seconds()
	res.HeapInUseMB = after["go_memstats_heap_inuse_bytes"] / (1 << 20)
	res.ResidentMB = after["process_resident_memory_bytes"] / (1 << 20)
	f.logf("scale: %d endpoints, %d routes: gateway ready in %.1f s, heap in use %.0f MB, resident %.0f MB, idle %.2f cores",
		res.Endpoints, res.Routes, res.SyncSeconds, res.HeapInUseMB, res.ResidentMB, res.IdleCores)
	return res, nil
}

// scalePod registers engine pod i, ready, on an address of 127.1.0.0/16 where nothing
// listens; pod i serves model scale-(i mod scaleModels).
func (f *fleet) scalePod(ctx context.Context, ns string, i int) error {
	ip := fmt.Sprintf("127.1.%d.%d", i/250, i%250+1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("engine-%05d", i), Labels: map[string]string{
			"app": "scale-engine", "switchboard.dev/model": fmt.Sprintf("scale-%d", i%scaleModels), "switchboard.dev/port": "8000",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine-sim",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}}}},
	}
	if err := f.client.Create(ctx, pod); err != nil {
		return fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := f.client.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("set pod %s ready: %w", pod.Name, err)
	}
	return nil
}

// scaleRoute creates HTTPRoute i: host route-i.example, the least-request policy and the
// Service of every engine.
func (f *fleet) scaleRoute(ctx context.Context, ns string, i int) error {
	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("route-%04d", i)},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "scale"}}},
			Hostnames:       []gatewayv1.Hostname{gatewayv1.Hostname(fmt.Sprintf("route-%d.example", i))},
			Rules: []gatewayv1.HTTPRouteRule{{
				Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterExtensionRef,
					ExtensionRef: &gatewayv1.LocalObjectReference{Group: gatewayv1.Group(v1alpha1.GroupVersion.Group),
						Kind: "RoutingPolicy", Name: "least-request"}}},
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{Name: "engines", Port: new(gatewayv1.PortNumber(8000))}}}},
			}},
		},
	}
	if err := f.client.Create(ctx, route); err != nil {
		return fmt.Errorf("create HTTPRoute %s: %w", route.Name, err)
	}
	return nil
}

// parallel runs do(i) for i in [0, n) on at most workers goroutines and returns the
// first error, which cancels the rest.
func parallel(ctx context.Context, workers, n int, do func(context.Context, int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return do(ctx, i) })
	}
	return g.Wait()
}

// gatewayMetrics reads the gauges and counters of the gateway's metrics endpoint, by name.
func gatewayMetrics(ctx context.Context, addr string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the gateway's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse the gateway's metrics: %w", err)
	}
	out := map[string]float64{}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				out[name] += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[name] += m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}

// renderScale writes the scale section.
func renderScale(w writef, r *ScaleResult) {
	if r == nil {
		return
	}
	w("## 4. Scale\n\n")
	w("One gateway reading %d engine pods (%d models, one in ten each, all behind one Service) and %d HTTPRoutes, each with its own ", r.Endpoints, r.Models, r.Routes)
	w("hostname, a least-request RoutingPolicy and that Service as backend. The pods are ready on addresses where nothing listens, ")
	w("so the scraper tries every one of them and backs off. Figures from the gateway's own metrics, %.0f s after it became ready.\n\n", r.WindowSeconds)
	w("| endpoints | routes | ready after | heap in use | resident | idle CPU |\n|--:|--:|--:|--:|--:|--:|\n")
	w("| %d | %d | %.1f s | %.0f MB | %.0f MB | %.2f cores |\n\n", r.Endpoints, r.Routes, r.SyncSeconds, r.HeapInUseMB, r.ResidentMB, r.IdleCores)
}
