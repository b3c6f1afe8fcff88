package modeladapter

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/engineclient"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv("TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	}
	// The integration tests share one control plane, which RunMain stops.
	os.Exit(testenv.RunMain(m))
}

// startCluster returns the control plane the package's integration tests share, each in
// namespaces of its own (newNamespace), or skips t when there are no control plane
// binaries: the unit tests of the package still run without them.
func startCluster(t *testing.T) *testenv.Cluster {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS not set; run through make test")
	}
	return testenv.Shared(t)
}

// newNamespace creates a namespace for t named prefix plus a random suffix.
func newNamespace(t *testing.T, c *testenv.Cluster, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	c.Create(t, ns)
	return ns.Name
}

// engine is an in-process engine simulator on a loopback address of its own, with the
// admin requests a manager started by runManager sent it when it was counted. Its server
// can stop and serve again on the same address, the engine keeping its adapters, as an
// engine cut off from the network and back.
type engine struct {
	*enginesim.Engine
	addr  string
	loads atomic.Int64
	lists atomic.Int64

	mu  sync.Mutex
	srv *http.Server
}

// nextHost hands out 127.0.0.x addresses, one per engine.
var nextHost atomic.Int32

// startEngine serves an engine for model until the test ends.
func startEngine(t *testing.T, model string, mutate func(*enginesim.Config)) *engine {
	t.Helper()
	return startEngineOn(t, "127.0.0."+strconv.Itoa(int(2+nextHost.Add(1)%250)), model, mutate)
}

// startEngineOn serves an engine for model on a free port of host until the test ends.
func startEngineOn(t *testing.T, host, model string, mutate func(*enginesim.Config)) *engine {
	t.Helper()
	cfg := enginesim.DefaultConfig()
	cfg.Model = model
	cfg.LoRALoadTime = 0
	if mutate != nil {
		mutate(&cfg)
	}
	sim, err := enginesim.NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{Engine: sim}
	e.addr = e.serve(t, net.JoinHostPort(host, "0"))
	t.Cleanup(e.stop)
	return e
}

// serve serves the engine on addr and returns the address it listens on.
func (e *engine) serve(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.Handler()}
	go func() { _ = srv.Serve(ln) }()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.srv = srv
	return ln.Addr().String()
}

// stop closes the engine's server and its connections: its address refuses connections
// until restart.
func (e *engine) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil {
		_ = e.srv.Close()
		e.srv = nil
	}
}

// restart serves the stopped engine on its address again.
func (e *engine) restart(t *testing.T) {
	t.Helper()
	e.serve(t, e.addr)
}

// holds reports whether the engine lists adapter through its API.
func (e *engine) holds(t *testing.T, adapter string) bool {
	t.Helper()
	ids, err := engineclient.New(nil).Models(context.Background(), "http://"+e.addr, e.Config().APIKey)
	if err != nil {
		t.Fatalf("list models of %s: %v", e.addr, err)
	}
	return slices.Contains(ids, adapter)
}

// newEnginePod creates a Running, Ready Pod for e labelled with labels.
func newEnginePod(t *testing.T, c *testenv.Cluster, ns, name string, e *engine, labels map[string]string) *corev1.Pod {
	t.Helper()
	return c.EnginePod(t, ns, name, e.Config().Model, e.addr, labels)
}

// twoEnginePods starts two engines of model llama and registers them as pods p1 and p2 of
// a new namespace named prefix plus a random suffix.
func twoEnginePods(t *testing.T, c *testenv.Cluster, prefix string) (ns string, e1, e2 *engine) {
	t.Helper()
	ns = newNamespace(t, c, prefix)
	e1, e2 = startEngine(t, "llama", nil), startEngine(t, "llama", nil)
	newEnginePod(t, c, ns, "p1", e1, nil)
	newEnginePod(t, c, ns, "p2", e2, nil)
	return ns, e1, e2
}

// adapter returns a ModelAdapter fixture.
func adapter(ns, name, base string, selector map[string]string, replicas *int32) *v1alpha1.ModelAdapter {
	return &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ModelAdapterSpec{
			BaseModel:   base,
			PodSelector: &metav1.LabelSelector{MatchLabels: selector},
			ArtifactURL: "s3://adapters/" + name,
			Replicas:    replicas,
		},
	}
}

// runManager runs a manager with the manager cache context and the ModelAdapter
// controller, tuned for tests, on c until t ends. The controller's admin requests to the
// counted engines add to their loads and lists.
func runManager(t *testing.T, c *testenv.Cluster, counted ...*engine) {
	t.Helper()
	runManagerWith(t, c, nil, counted...)
}

// runManagerWith is runManager with tune, if not nil, adjusting the Reconciler before it
// is set up.
func runManagerWith(t *testing.T, c *testenv.Cluster, tune func(*Reconciler), counted ...*engine) {
	t.Helper()
	c.RunManager(t, func(mgr ctrl.Manager) error {
		view, err := cache.InitForManager(mgr)
		if err != nil {
			return err
		}
		tr := &http.Transport{}
		// Registered before RunManager's own cleanup, so it runs once the manager stopped.
		t.Cleanup(tr.CloseIdleConnections)
		rt := countingTransport{next: tr, engines: map[string]*engine{}}
		for _, e := range counted {
			rt.engines[e.addr] = e
		}
		r := &Reconciler{
			Client: mgr.GetClient(),
			Pods:   view,
			// The Reconciler's per-call timeouts bound every request.
			Engine:        engineclient.New(&http.Client{Transport: rt}),
			ResyncPeriod:  300 * time.Millisecond,
			MinRetryDelay: 50 * time.Millisecond,
			MaxRetryDelay: 300 * time.Millisecond,
		}
		if tune != nil {
			tune(r)
		}
		return r.SetupWithManager(mgr)
	})
}

// countingTransport counts the adapter loads and model lists sent to engines, by address.
type countingTransport struct {
	next    http.RoundTripper
	engines map[string]*engine
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if e := c.engines[r.URL.Host]; e != nil {
		switch r.URL.Path {
		case "/v1/load_lora_adapter":
			e.loads.Add(1)
		case "/v1/models":
			e.lists.Add(1)
		}
	}
	return c.next.RoundTrip(r)
}

// waitFor polls cond and fails t if it does not hold within 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.WaitUntil(t, 30*time.Second, what, cond)
}

// get reads the current ModelAdapter, or nil once it is gone.
func get(t *testing.T, c *testenv.Cluster, ns, name string) *v1alpha1.ModelAdapter {
	t.Helper()
	ma := new(v1alpha1.ModelAdapter)
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ma)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ma
}

// readyReason returns the reason of ma's Ready condition and whether it is True.
func readyReason(ma *v1alpha1.ModelAdapter) (string, bool) {
	c := meta.FindStatusCondition(ma.Status.Conditions, v1alpha1.ModelAdapterConditionReady)
	if c == nil {
		return "", false
	}
	return c.Reason, c.Status == metav1.ConditionTrue
}

// waitForStatus waits until the adapter's Ready reason is reason and its instances are
// instances, and returns it.
func waitForStatus(t *testing.T, c *testenv.Cluster, ns, name, reason string, instances ...string) *v1alpha1.ModelAdapter {
	t.Helper()
	var ma *v1alpha1.ModelAdapter
	waitFor(t, fmt.Sprintf("%s/%s is %s on %v", ns, name, reason, instances), func() bool {
		ma = get(t, c, ns, name)
		got, _ := readyReason(ma)
		return got == reason && slices.Equal(ma.Status.Instances, instances) &&
			ma.Status.ObservedGeneration == ma.Generation
	})
	return ma
}
