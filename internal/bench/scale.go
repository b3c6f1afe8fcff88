package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
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
// all. Before that, in the same control plane, its scraped part measures the scrapers
// of the gateway and of the metadata service, both running, over a fleet of engine-sim
// engines that an HTTPRoute names: how old the metrics each holds are, and the CPU each
// uses.

// ScaleResult is what the scale section measured.
type ScaleResult struct {
	Endpoints int `json:"endpoints"`
	Models    int `json:"models"`
	Routes    int `json:"routes"`
	// SyncSeconds is how long the gateway took from start to ready (its cache synced).
	SyncSeconds float64 `json:"sync_s"`
	// HeapInUseMB is the peak of the gateway's heap in use (its own metric, read every
	// second of the window); ResidentMB is its resident memory after the window.
	HeapInUseMB float64 `json:"heap_in_use_mb"`
	ResidentMB  float64 `json:"resident_mb"`
	// GCPercent is the gateway's GOGC, as its go_gc_gogc_percent reports it.
	GCPercent float64 `json:"gc_percent"`
	// IdleCores is the gateway's CPU over the window, in cores, with no traffic: the
	// informers and the scraper's attempts on every endpoint.
	IdleCores float64 `json:"idle_cores"`
	// WindowSeconds is the length of that window.
	WindowSeconds float64 `json:"window_s"`
	// Scraped is the scraped part; nil when it was skipped.
	Scraped *ScrapedResult `json:"scraped,omitempty"`
}

// ScrapedResult is what the scale section's scraped part measured.
type ScrapedResult struct {
	Engines int `json:"engines"`
	// WindowSeconds is the length of each of the two windows: one sampling the ages, one
	// (undisturbed by the sampling) measuring the CPU.
	WindowSeconds float64 `json:"window_s"`
	// Gateway and Metadata are each process's view.
	Gateway  ScraperView `json:"gateway"`
	Metadata ScraperView `json:"metadata"`
	// EngineCores is the CPU of the engine-sim process serving every engine, over the
	// CPU window, in cores.
	EngineCores float64 `json:"engine_cores"`
}

// ScraperView is one process's scraper as the scraped part saw it.
type ScraperView struct {
	// AgeP50MS, AgeP99MS and AgeMaxMS are quantiles of the metrics ages the process
	// reported, every engine sampled every ageSamplePeriod over the window.
	AgeP50MS float64 `json:"age_p50_ms"`
	AgeP99MS float64 `json:"age_p99_ms"`
	AgeMaxMS float64 `json:"age_max_ms"`
	// Samples is the number of ages sampled.
	Samples int `json:"samples"`
	// Cores is the process's CPU over the window, in cores.
	Cores float64 `json:"cores"`
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
	f := newFleet(cfg)
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
	if f.metricsAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	if f.probeAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	var scraped *ScrapedResult
	if cfg.ScaleScraped > 0 {
		if scraped, err = f.runScraped(ctx, ns, cfg.ScaleScraped); err != nil {
			return nil, fmt.Errorf("scraped part: %w", err)
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

	started = time.Now()
	if err := f.startGateway(ctx); err != nil {
		return nil, err
	}
	res := &ScaleResult{Endpoints: cfg.ScaleEndpoints, Models: scaleModels, Routes: cfg.ScaleRoutes,
		SyncSeconds: time.Since(started).Seconds(), WindowSeconds: cfg.ScaleWindow.Seconds(), Scraped: scraped}
	before, err := f.readMetrics(ctx, f.metricsAddr)
	if err != nil {
		return nil, err
	}
	// The heap in use rises and falls with each collection cycle: one sample reads
	// wherever the cycle is, so the window is sampled every second for its peak.
	var after map[string]float64
	for end := time.Now().Add(cfg.ScaleWindow); ; {
		if err := sleep(ctx, min(time.Second, time.Until(end))); err != nil {
			return nil, err
		}
		if after, err = f.readMetrics(ctx, f.metricsAddr); err != nil {
			return nil, err
		}
		res.HeapInUseMB = max(res.HeapInUseMB, after["go_memstats_heap_inuse_bytes"]/(1<<20))
		if !time.Now().Before(end) {
			break
		}
	}
	res.IdleCores = (after["process_cpu_seconds_total"] - before["process_cpu_seconds_total"]) / cfg.ScaleWindow.Seconds()
	res.GCPercent = after["go_gc_gogc_percent"]
	res.ResidentMB = after["process_resident_memory_bytes"] / (1 << 20)
	f.logf("scale: %d endpoints, %d routes: gateway ready in %.1f s, heap in use at peak %.0f MB, resident %.0f MB, idle %.2f cores, GOGC %.0f",
		res.Endpoints, res.Routes, res.SyncSeconds, res.HeapInUseMB, res.ResidentMB, res.IdleCores, res.GCPercent)
	return res, nil
}

// scalePod registers engine pod i, ready, on an address of 127.1.0.0/16 where nothing
// listens; pod i serves model scale-(i mod scaleModels).
func (f *fleet) scalePod(ctx context.Context, ns string, i int) error {
	return f.readyPod(ctx, ns, fmt.Sprintf("engine-%05d", i), fmt.Sprintf("127.1.%d.%d", i/250, i%250+1),
		map[string]string{"app": "scale-engine", "switchboard.dev/model": fmt.Sprintf("scale-%d", i%scaleModels)})
}

// readyPod registers a ready engine pod on ip, with labels, whose engine listens on port
// 8000.
func (f *fleet) readyPod(ctx context.Context, ns, name, ip string, labels map[string]string) error {
	labels["switchboard.dev/port"] = "8000"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
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

// readMetrics reads the gauges and counters of the metrics endpoint at addr, by name,
// summing the series of a family.
func (f *fleet) readMetrics(ctx context.Context, addr string) (map[string]float64, error) {
	families, err := f.metricFamilies(ctx, addr)
	if err != nil {
		return nil, err
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

// metricFamilies reads the metrics endpoint at addr, by family name.
func (f *fleet) metricFamilies(ctx context.Context, addr string) (map[string]*dto.MetricFamily, error) {
	text, err := f.scrape(ctx, addr)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse the metrics of %s: %w", addr, err)
	}
	return families, nil
}

// sleep waits for d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// renderScale writes the scale section.
func renderScale(w writef, r *ScaleResult) {
	if r == nil {
		return
	}
	w("## 4. Scale\n\n")
	w("One gateway reading %d engine pods (%d models, one in ten each, all behind one Service) and %d HTTPRoutes, each with its own ", r.Endpoints, r.Models, r.Routes)
	w("hostname, a least-request RoutingPolicy and that Service as backend. The pods are ready on addresses where nothing listens, ")
	w("so the scraper tries every one of them and backs off. Figures from the gateway's own metrics over the %.0f s after it became ready: the heap in use at its highest, read every second, and the rest at the end.\n\n", r.WindowSeconds)
	w("| endpoints | routes | ready after | heap in use (peak) | resident | idle CPU | GOGC |\n|--:|--:|--:|--:|--:|--:|--:|\n")
	w("| %d | %d | %.1f s | %.0f MB | %.0f MB | %.2f cores | %.0f |\n\n", r.Endpoints, r.Routes, r.SyncSeconds, r.HeapInUseMB, r.ResidentMB, r.IdleCores, r.GCPercent)
	renderScraped(w, r.Scraped)
}

// renderScraped writes the scale section's scraped part.
func renderScraped(w writef, r *ScrapedResult) {
	if r == nil {
		return
	}
	w("### %d engines scraped\n\n", r.Engines)
	w("Before the pods above, %d engines of one engine-sim process, ready pods behind a Service that an HTTPRoute names, ", r.Engines)
	w("scraped at the default 100 ms interval by a gateway and a metadata service running side by side. ")
	w("The ages are those each process reports (the gateway's `switchboard_gateway_endpoint_metrics_age_seconds`, ")
	w("the metadata service's `/v1/endpoints`), every engine sampled every %d ms over %.0f s; ", ageSamplePeriod.Milliseconds(), r.WindowSeconds)
	w("the CPU is each process's over the next %.0f s, with nothing but the scrapes to do. ", r.WindowSeconds)
	w("The engine-sim process serving the engines used %.2f cores meanwhile: where the machine cannot spare them, ", r.EngineCores)
	w("its answers come late and the ages show it.\n\n")
	w("| scraper | age p50 | age p99 | age max | samples | CPU |\n|--|--:|--:|--:|--:|--:|\n")
	for _, v := range []struct {
		name string
		view ScraperView
	}{{"gateway", r.Gateway}, {"metadata service", r.Metadata}} {
		w("| %s | %.0f ms | %.0f ms | %.0f ms | %d | %.2f cores |\n", v.name, v.view.AgeP50MS, v.view.AgeP99MS, v.view.AgeMaxMS, v.view.Samples, v.view.Cores)
	}
	w("\n")
}

// ageSamplePeriod is how often the scraped part samples the metrics ages: not a multiple
// of the scrape interval, so that the samples fall at every phase of it.
const ageSamplePeriod = 230 * time.Millisecond

// runScraped runs the scraped part with n engines: engine-sim listening on n addresses of
// 127.2.0.0/16, registered as ready pods behind a Service that an HTTPRoute of the scale
// Gateway names, a gateway and a metadata service at their default scrape interval. It
// removes what it created when it returns.
func (f *fleet) runScraped(ctx context.Context, ns string, n int) (*ScrapedResult, error) {
	f.engines = nil
	for i := range n {
		f.engines = append(f.engines, fmt.Sprintf("127.2.%d.%d:8000", i/250, i%250+1))
	}
	for _, addr := range f.engines {
		if busy(addr) {
			return nil, fmt.Errorf("engine address %s is already in use", addr)
		}
	}
	labels := map[string]string{"app": "scraped-engine"}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scraped-engines"},
		Spec: corev1.ServiceSpec{Selector: labels,
			Ports: []corev1.ServicePort{{Name: "http", Port: 8000, TargetPort: intstr.FromInt32(8000)}}}}
	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scraped"},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "scale"}}},
			Hostnames:       []gatewayv1.Hostname{"scraped.example"},
			Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
				BackendObjectReference: gatewayv1.BackendObjectReference{Name: "scraped-engines", Port: new(gatewayv1.PortNumber(8000))}}}}}},
		},
	}
	for _, o := range []client.Object{svc, route} {
		if err := f.createOrUpdate(ctx, o); err != nil {
			return nil, err
		}
	}
	defer f.removeScraped(ns, labels, svc, route)
	err := parallel(ctx, 32, n, func(ctx context.Context, i int) error {
		host, _, _ := net.SplitHostPort(f.engines[i])
		return f.readyPod(ctx, ns, fmt.Sprintf("scraped-%04d", i), host,
			map[string]string{"app": "scraped-engine", "switchboard.dev/model": benchModel})
	})
	if err != nil {
		return nil, err
	}
	f.logf("scale: starting %d engines, a gateway and a metadata service", n)
	if err := f.startEngines(ctx, f.cfg.Seed); err != nil {
		return nil, err
	}
	if err := f.startGateway(ctx); err != nil {
		return nil, err
	}
	md, err := f.startMetadata(ctx)
	if err != nil {
		return nil, err
	}
	defer md.stop()

	res := &ScrapedResult{Engines: n, WindowSeconds: f.cfg.ScaleWindow.Seconds()}
	views := []struct {
		name string
		ages func(context.Context) ([]float64, error)
		out  *ScraperView
	}{
		{"gateway", f.gatewayAges, &res.Gateway},
		{"metadata service", md.ages, &res.Metadata},
	}
	err = f.waitFor(ctx, "the gateway and the metadata service to hold every engine's metrics", md.process, func() bool {
		for _, v := range views {
			if ages, err := v.ages(ctx); err != nil || len(ages) < n {
				return false
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	// Let the schedules settle, then sample the ages over one window.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	samples := make([][]float64, len(views))
	for end := time.Now().Add(f.cfg.ScaleWindow); time.Now().Before(end); {
		for i, v := range views {
			ages, err := v.ages(ctx)
			if err != nil {
				return nil, err
			}
			samples[i] = append(samples[i], ages...)
		}
		if err := sleep(ctx, ageSamplePeriod); err != nil {
			return nil, err
		}
	}
	// Then the CPU over another window, which nothing but the scrapes disturbs.
	procs := []*process{f.gateway, md.process, f.engineProc}
	before := make([]float64, len(procs))
	for i, p := range procs {
		if before[i], err = p.cpuSeconds(); err != nil {
			return nil, err
		}
	}
	if err := sleep(ctx, f.cfg.ScaleWindow); err != nil {
		return nil, err
	}
	cores := make([]float64, len(procs))
	for i, p := range procs {
		after, err := p.cpuSeconds()
		if err != nil {
			return nil, err
		}
		cores[i] = (after - before[i]) / f.cfg.ScaleWindow.Seconds()
	}
	res.EngineCores = cores[2]
	for i, v := range views {
		slices.Sort(samples[i])
		*v.out = ScraperView{
			AgeP50MS: 1000 * Percentile(samples[i], 0.5),
			AgeP99MS: 1000 * Percentile(samples[i], 0.99),
			AgeMaxMS: 1000 * Percentile(samples[i], 1),
			Samples:  len(samples[i]),
			Cores:    cores[i],
		}
		f.logf("scale: %d engines scraped, as the %s sees them: age p50 %.0f ms, p99 %.0f ms, max %.0f ms; %.2f cores",
			n, v.name, v.out.AgeP50MS, v.out.AgeP99MS, v.out.AgeMaxMS, v.out.Cores)
	}
	f.logf("scale: engine-sim serving the %d engines: %.2f cores", n, res.EngineCores)
	return res, nil
}

// clockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpuSeconds returns the user and system CPU time used so far by the live processes of
// p's process group (p, and the children it did not move out of it, such as nginx's
// workers), from /proc/<pid>/stat; 0 for a nil p.
func (p *process) cpuSeconds() (float64, error) {
	if p == nil {
		return 0, nil
	}
	pgrp := strconv.Itoa(p.cmd.Process.Pid)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("CPU time of %s: %w", p.name, err)
	}
	var ticks float64
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command, which is in parentheses (and may itself hold
		// them: the last one closes it), start at the third: pgrp is the 5th, utime and
		// stime the 14th and 15th.
		end := bytes.LastIndexByte(stat, ')')
		fields := strings.Fields(string(stat[end+1:]))
		if end < 0 || len(fields) < 13 {
			return 0, fmt.Errorf("CPU time of %s: malformed /proc stat %q", p.name, stat)
		}
		if fields[2] != pgrp {
			continue
		}
		for _, field := range fields[11:13] {
			n, err := strconv.ParseUint(field, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("CPU time of %s: %w", p.name, err)
			}
			ticks += float64(n)
		}
	}
	return ticks / clockTicks, nil
}

// removeScraped stops the gateway and the engines of the scraped part and deletes its
// objects, so that the rest of the scale section meets none of them.
func (f *fleet) removeScraped(ns string, labels map[string]string, objs ...client.Object) {
	f.gateway.stop()
	f.gateway = nil
	f.engineProc.stop()
	f.engineProc = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
		f.logf("scale: delete the scraped engines' pods: %v", err)
	}
	for _, o := range objs {
		if err := client.IgnoreNotFound(f.client.Delete(ctx, o)); err != nil {
			f.logf("scale: delete %s: %v", o.GetName(), err)
		}
	}
}

// gatewayAges returns the metrics ages, in seconds, of the endpoints the gateway holds
// metrics of.
func (f *fleet) gatewayAges(ctx context.Context) ([]float64, error) {
	families, err := f.metricFamilies(ctx, f.metricsAddr)
	if err != nil {
		return nil, err
	}
	var ages []float64
	for _, m := range families["switchboard_gateway_endpoint_metrics_age_seconds"].GetMetric() {
		ages = append(ages, m.GetGauge().GetValue())
	}
	return ages, nil
}

// metadataService is a running metadata service.
type metadataService struct {
	*process
	// apiAddr serves its API.
	apiAddr string
}

// startMetadata starts a metadata service and waits until it is ready.
func (f *fleet) startMetadata(ctx context.Context) (*metadataService, error) {
	md := &metadataService{}
	var probeAddr string
	for _, addr := range []*string{&md.apiAddr, &probeAddr} {
		var err error
		if *addr, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	var err error
	md.process, err = startProcess("metadata-service", f.logPath("metadata-service"), nil,
		filepath.Join(f.cfg.Root, "bin", "metadata-service"), "--kubeconfig", f.kubeconfig,
		"--bind-address", md.apiAddr, "--metrics-bind-address", "0",
		"--health-probe-bind-address", probeAddr, "--zap-log-level", "error")
	if err != nil {
		return nil, err
	}
	err = f.waitFor(ctx, "the metadata service to be ready", md.process, func() bool {
		return f.ok("http://" + probeAddr + "/readyz")
	})
	if err != nil {
		md.stop()
		return nil, err
	}
	return md, nil
}

// ages returns the metrics ages, in seconds, of the endpoints the metadata service
// lists with metrics.
func (md *metadataService) ages(ctx context.Context) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+md.apiAddr+"/v1/endpoints", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list the metadata service's endpoints: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list the metadata service's endpoints: HTTP %d", resp.StatusCode)
	}
	var list struct {
		Data []struct {
			Metrics *struct {
				AgeSeconds float64 `json:"age_seconds"`
			} `json:"metrics"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("decode the metadata service's endpoints: %w", err)
	}
	var ages []float64
	for _, e := range list.Data {
		if e.Metrics != nil {
			ages = append(ages, e.Metrics.AgeSeconds)
		}
	}
	return ages, nil
}
