package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/scheme"
)

const (
	benchNamespace = "switchboard-bench"
	benchModel     = "llama-3-8b"
	engineLabel    = "switchboard-bench-engine"
	// strategyHeader selects the HTTPRoute, and so the RoutingPolicy, of a request.
	strategyHeader = "x-bench-strategy"
	endpointHeader = "x-switchboard-endpoint"
)

// fleet is the system under test: a private control plane, the engines and the gateway.
type fleet struct {
	cfg        Config
	kubeconfig string
	client     client.Client
	engines    []string // "ip:port", in pod order
	engineProc *process
	gateway    *process
	gatewayURL string
	// metricsAddr and probeAddr are the gateway's; a restarted gateway keeps them.
	metricsAddr, probeAddr string
	http                   *http.Client
}

// newFleet returns the fleet of cfg, with nothing started yet.
func newFleet(cfg Config) *fleet {
	return &fleet{cfg: cfg, http: &http.Client{Transport: &http.Transport{
		MaxIdleConns: 2048, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}, Timeout: 2 * time.Minute}}
}

// clusterEnv is the environment of hack/cluster.sh for f's private control plane.
func (f *fleet) clusterEnv() []string {
	return []string{
		"CLUSTER_DIR=" + filepath.Join(f.cfg.StateDir, "cluster"),
		"KUBECONFIG_OUT=" + f.kubeconfig,
		"APISERVER_PORT=" + strconv.Itoa(f.cfg.APIServerPort),
		"ETCD_PORT=" + strconv.Itoa(f.cfg.EtcdPort),
		// The controller manager's port follows the API server's, so that two benches
		// with their own ports share none.
		"CONTROLLER_MANAGER_PORT=" + strconv.Itoa(f.cfg.APIServerPort+1),
	}
}

// up starts the control plane, the engines and the gateway and creates every object. On
// error the caller still calls down.
func (f *fleet) up(ctx context.Context) error {
	for i := range f.cfg.Engines {
		f.engines = append(f.engines, fmt.Sprintf("127.0.0.%d:8000", f.cfg.EngineIPBase+i))
	}
	for _, addr := range f.engines {
		if busy(addr) {
			return fmt.Errorf("engine address %s is already in use", addr)
		}
	}

	if err := f.startCluster(ctx); err != nil {
		return err
	}
	if err := f.startEngines(ctx, f.cfg.Seed); err != nil {
		return err
	}
	listener, err := freeAddr()
	if err != nil {
		return err
	}
	f.gatewayURL = "http://" + listener
	if err := f.createObjects(ctx, listener); err != nil {
		return err
	}

	if f.metricsAddr, err = freeAddr(); err != nil {
		return err
	}
	if f.probeAddr, err = freeAddr(); err != nil {
		return err
	}
	f.logf("starting the gateway (listener %s)", f.gatewayURL)
	return f.startGateway(ctx)
}

// startCluster starts the private control plane and connects f.client to it. On error
// the caller still calls down.
func (f *fleet) startCluster(ctx context.Context) error {
	f.kubeconfig = filepath.Join(f.cfg.StateDir, "kubeconfig")
	f.logf("starting a private control plane (hack/cluster.sh up, API server 127.0.0.1:%d, state %s)",
		f.cfg.APIServerPort, filepath.Join(f.cfg.StateDir, "cluster"))
	if err := runProcess(ctx, "cluster-up", f.logPath("cluster"), f.clusterEnv(),
		filepath.Join(f.cfg.Root, "hack", "cluster.sh"), "up"); err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = 2000, 4000 // the scale section creates thousands of objects
	s, err := scheme.New()
	if err != nil {
		return err
	}
	if f.client, err = client.New(rc, client.Options{Scheme: s}); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	return nil
}

// startGateway starts the gateway and waits until it is ready.
func (f *fleet) startGateway(ctx context.Context) error {
	args := []string{"--kubeconfig", f.kubeconfig,
		"--metrics-bind-address", f.metricsAddr, "--health-probe-bind-address", f.probeAddr,
		"--zap-log-level", "error"}
	if f.cfg.GatewayPprof != "" {
		args = append(args, "--pprof-bind-address", f.cfg.GatewayPprof)
	}
	var err error
	f.gateway, err = startProcess("gateway", f.logPath("gateway"), nil, filepath.Join(f.cfg.Root, "bin", "gateway"), args...)
	if err != nil {
		return err
	}
	return f.waitFor(ctx, "the gateway to be ready", f.gateway, func() bool {
		return f.ok("http://" + f.probeAddr + "/readyz")
	})
}

// down stops everything up started, last started first. It is safe after a failed up.
func (f *fleet) down() {
	f.gateway.stop()
	f.engineProc.stop()
	if f.kubeconfig == "" {
		return
	}
	f.logf("stopping the private control plane")
	if err := runProcess(context.Background(), "cluster-down", f.logPath("cluster"), f.clusterEnv(),
		filepath.Join(f.cfg.Root, "hack", "cluster.sh"), "down"); err != nil {
		f.logf("cluster down: %v", err)
	}
}

// slotArgs returns the engines' batch size as a command line gives it: the engine-sim
// process runs with it, and the engine pods declare it, so that the gateway reads from
// the pods the slots the engines really have.
func (f *fleet) slotArgs() []string {
	return []string{"--max-num-seqs", strconv.Itoa(f.cfg.MaxNumSeqs)}
}

// startEngines starts one engine-sim process serving every engine address, with seed for
// its output lengths and texts, and waits until each is healthy. A fresh start means empty
// KV caches and zeroed metrics.
func (f *fleet) startEngines(ctx context.Context, seed uint64) error {
	args := []string{
		"--listen", strings.Join(f.engines, ","), "--model", benchModel,
		"--kv-blocks", strconv.Itoa(f.cfg.KVBlocks), "--block-size", strconv.Itoa(f.cfg.BlockSize),
		"--time-scale", strconv.FormatFloat(f.cfg.TimeScale, 'g', -1, 64), "--seed", strconv.FormatUint(seed, 10),
	}
	args = append(args, f.slotArgs()...)
	var err error
	f.engineProc, err = startProcess("engine-sim", f.logPath("engine-sim"), nil, filepath.Join(f.cfg.Root, "bin", "engine-sim"), args...)
	if err != nil {
		return err
	}
	return f.waitFor(ctx, "the engines to be healthy", f.engineProc, func() bool {
		for _, e := range f.engines {
			if !f.ok("http://" + e + "/health") {
				return false
			}
		}
		return true
	})
}

// restart replaces the engines with fresh ones (cold caches) seeded with seed and the
// gateway with a fresh one, and waits until the gateway routes to every engine. A fresh
// gateway has forgotten what earlier runs taught it: an engine its outlier detection
// ejected after failing on purpose (whose back-off grows with every ejection, and which
// would otherwise decide which strategy meets the failing engine first), and the learned
// prefixes and latencies.
func (f *fleet) restart(ctx context.Context, seed uint64) error {
	f.gateway.stop()
	f.engineProc.stop()
	for _, e := range f.engines {
		for deadline := time.Now().Add(10 * time.Second); busy(e) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := f.startEngines(ctx, seed); err != nil {
		return err
	}
	if err := f.startGateway(ctx); err != nil {
		return err
	}
	return f.waitRoutable(ctx)
}

// withFailingEngines makes the first n engines answer every inference request with an
// error at once, runs fn and clears the engines' faults again, also when fn fails or ctx is
// cancelled. With n zero it only runs fn.
func (f *fleet) withFailingEngines(ctx context.Context, n int, fn func() error) (err error) {
	if n == 0 {
		return fn()
	}
	if n < 0 || n >= len(f.engines) {
		return fmt.Errorf("%d failing engines: want between 0 and %d", n, len(f.engines)-1)
	}
	failing := f.engines[:n]
	defer func() {
		// The run may have been cancelled: restore with a context of its own.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, e := range failing {
			if rerr := f.setFaults(rctx, e, enginesim.Faults{}); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restore engine %s: %w", e, rerr))
			}
		}
	}()
	for _, e := range failing {
		f.logf("engine %s answers every request with an error (fail_fraction 1)", e)
		if err := f.setFaults(ctx, e, enginesim.Faults{FailFraction: 1}); err != nil {
			return fmt.Errorf("fail engine %s: %w", e, err)
		}
	}
	return fn()
}

// setFaults replaces the injected faults of the engine at addr through its /admin/faults.
func (f *fleet) setFaults(ctx context.Context, addr string, faults enginesim.Faults) error {
	body, err := json.Marshal(faults)
	if err != nil {
		return fmt.Errorf("encode faults: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/admin/faults", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	resp, err := f.http.Do(req)
	if err != nil {
		return fmt.Errorf("post /admin/faults: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("post /admin/faults: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// waitRoutable sends small probes on the round-robin route until every engine has answered
// one through the gateway.
func (f *fleet) waitRoutable(ctx context.Context) error {
	seen := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < len(f.engines) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway routed to only %d of %d engines within 60 s (log: %s)", len(seen), len(f.engines), f.gateway.log)
		}
		if f.gateway.exited() {
			return fmt.Errorf("the gateway exited (log: %s)", f.gateway.log)
		}
		body := `{"model":"` + benchModel + `","max_tokens":1,"messages":[{"role":"user","content":"probe"}]}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.gatewayURL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set(strategyHeader, "round-robin")
		resp, err := f.http.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				seen[resp.Header.Get(endpointHeader)] = true
				continue
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Let the gateway scrape the idle engines once more, so that load-aware strategies
	// start from fresh metrics.
	time.Sleep(300 * time.Millisecond)
	return nil
}

// policies returns the RoutingPolicy of every strategy the benchmark compares.
func policies() []*v1alpha1.RoutingPolicy {
	prefix := &v1alpha1.PrefixCacheConfig{
		BlockSize: new(int32(16)), MinMatchRatio: new("0.1"), LoadImbalanceThreshold: new(int32(8)),
	}
	mk := func(name string, spec v1alpha1.RoutingPolicySpec) *v1alpha1.RoutingPolicy {
		spec.Fallback = new(v1alpha1.StrategyLeastRequest)
		return &v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: name}, Spec: spec}
	}
	return []*v1alpha1.RoutingPolicy{
		mk("random", v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyRandom}),
		mk("round-robin", v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyRoundRobin}),
		mk("least-request", v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}),
		mk("least-kv-cache", v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastKVCache}),
		mk("prefix-cache", v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: prefix}),
		mk("weighted", v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyWeighted, PrefixCache: prefix,
			Scorers: []v1alpha1.Scorer{
				{Name: v1alpha1.StrategyPrefixCache, Weight: new(int32(2))},
				{Name: v1alpha1.StrategyLeastRequest, Weight: new(int32(1))},
			}}),
	}
}

// PolicySummary describes a policy in the report.
func policySummary(p *v1alpha1.RoutingPolicy) string {
	s := string(p.Spec.Strategy)
	if pc := p.Spec.PrefixCache; pc != nil {
		s += fmt.Sprintf(" (blockSize %d, minMatchRatio %s, loadImbalanceThreshold %d)", *pc.BlockSize, *pc.MinMatchRatio, *pc.LoadImbalanceThreshold)
	}
	for i, sc := range p.Spec.Scorers {
		if i == 0 {
			s += ": "
		} else {
			s += " + "
		}
		s += fmt.Sprintf("%d×%s", *sc.Weight, sc.Name)
	}
	return s
}

// retryAttempts is how many further endpoints the gateway tries for a request of p after a
// connection failure or a 5xx answer.
func retryAttempts(p *v1alpha1.RoutingPolicy) int {
	if r := p.Spec.Retry; r != nil && r.Attempts != nil {
		return int(*r.Attempts)
	}
	return gateway.DefaultRetryAttempts
}

func (f *fleet) createObjects(ctx context.Context, listener string) error {
	_, portText, _ := net.SplitHostPort(listener)
	port, _ := strconv.Atoi(portText)
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}},
		&gatewayv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: "switchboard-bench"},
			Spec:       gatewayv1.GatewayClassSpec{ControllerName: "switchboard.dev/gateway-controller"},
		},
		&gatewayv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: "bench"},
			Spec: gatewayv1.GatewaySpec{GatewayClassName: "switchboard-bench",
				Addresses: []gatewayv1.GatewaySpecAddress{{Value: "127.0.0.1"}}, Listeners: []gatewayv1.Listener{{
					Name: "http", Port: gatewayv1.PortNumber(port), Protocol: gatewayv1.HTTPProtocolType,
				}}},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: "engines"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": engineLabel},
				Ports: []corev1.ServicePort{{Name: "http", Port: 8000, TargetPort: intstr.FromString("http")}}},
		},
	}
	for _, p := range policies() {
		objs = append(objs, p, &gatewayv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: p.Name},
			Spec: gatewayv1.HTTPRouteSpec{
				CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "bench"}}},
				Rules: []gatewayv1.HTTPRouteRule{{
					Matches: []gatewayv1.HTTPRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{
						Name: strategyHeader, Value: p.Name,
					}}}},
					Filters: []gatewayv1.HTTPRouteFilter{{
						Type: gatewayv1.HTTPRouteFilterExtensionRef,
						ExtensionRef: &gatewayv1.LocalObjectReference{
							Group: gatewayv1.Group(v1alpha1.GroupVersion.Group), Kind: "RoutingPolicy", Name: gatewayv1.ObjectName(p.Name),
						},
					}},
					BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
						BackendObjectReference: gatewayv1.BackendObjectReference{Name: "engines", Port: new(gatewayv1.PortNumber(8000))},
					}}},
				}},
			},
		})
	}
	for _, o := range objs {
		if err := f.createOrUpdate(ctx, o); err != nil {
			return err
		}
	}
	// The control plane's state survives runs: drop engine pods of an earlier, larger fleet.
	if err := f.client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(benchNamespace),
		client.MatchingLabels{"app": engineLabel}); err != nil {
		return fmt.Errorf("delete old engine pods: %w", err)
	}
	for i, addr := range f.engines {
		host, port, _ := net.SplitHostPort(addr)
		portNumber, _ := strconv.Atoi(port)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("engine-%d", i), Labels: map[string]string{
				"app": engineLabel, "switchboard.dev/model": benchModel, "switchboard.dev/port": port,
			}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine-sim",
				Args:      f.slotArgs(),
				Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: int32(portNumber)}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
		}
		if err := f.client.Create(ctx, pod); err != nil {
			return fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
		pod.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: host, PodIPs: []corev1.PodIP{{IP: host}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		}
		if err := f.client.Status().Update(ctx, pod); err != nil {
			return fmt.Errorf("set pod %s ready: %w", pod.Name, err)
		}
	}
	return nil
}

// createOrUpdate creates o, or replaces the spec of an existing object of the same name (the
// control plane's state survives runs, and the listener port changes every run).
func (f *fleet) createOrUpdate(ctx context.Context, o client.Object) error {
	err := f.client.Create(ctx, o)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
		return nil
	}
	existing, ok := o.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copy %T", o)
	}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(o), existing); err != nil {
		return fmt.Errorf("get %T %s: %w", o, o.GetName(), err)
	}
	o.SetResourceVersion(existing.GetResourceVersion())
	if err := f.client.Update(ctx, o); err != nil {
		return fmt.Errorf("update %T %s: %w", o, o.GetName(), err)
	}
	return nil
}

// waitFor polls cond every 100 ms until it holds, failing when p exits or after 60 s.
func (f *fleet) waitFor(ctx context.Context, what string, p *process, cond func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if p.exited() {
			return fmt.Errorf("%s exited while waiting for %s (log: %s)", p.name, what, p.log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s (log: %s)", what, p.log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func (f *fleet) ok(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (f *fleet) logPath(name string) string { return filepath.Join(f.cfg.StateDir, name+".log") }

func (f *fleet) logf(format string, args ...any) { f.cfg.logf(format, args...) }

// busy reports whether something accepts connections on addr.
func busy(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// scrape returns the engine's metrics text.
func (f *fleet) scrape(ctx context.Context, addr string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, resp.Body); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: HTTP %d", addr, resp.StatusCode)
	}
	return buf.Bytes(), nil
}
