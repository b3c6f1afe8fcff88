package modeladapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/engineclient"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
	"github.com/switchboard-llm/switchboard/internal/scheme"
)

// The control plane shared by the integration tests; each test works in a namespace of
// its own.
var (
	restConfig *rest.Config
	k8s        client.Client
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Getenv("TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		// Unit tests still run; integration tests skip.
		return m.Run()
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	s, err := scheme.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: s}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	restConfig = cfg
	return m.Run()
}

// needCluster skips t when no control plane runs.
func needCluster(t *testing.T) {
	t.Helper()
	if k8s == nil {
		t.Skip("KUBEBUILDER_ASSETS not set; run through make test")
	}
}

// newNamespace creates a namespace for t named prefix plus a random suffix.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// engine is an in-process engine simulator on a loopback address of its own, counting the
// admin requests it answers.
type engine struct {
	*enginesim.Engine
	host  string
	port  int
	loads atomic.Int64
	lists atomic.Int64
}

// nextHost hands out 127.0.0.x addresses, one per engine.
var nextHost atomic.Int32

// startEngine serves an engine for model until the test ends.
func startEngine(t *testing.T, model string, mutate func(*enginesim.Config)) *engine {
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
	host := "127.0.0." + strconv.Itoa(int(2+nextHost.Add(1)%250))
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{Engine: sim, host: host, port: ln.Addr().(*net.TCPAddr).Port}
	inner := sim.Handler()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/load_lora_adapter":
			e.loads.Add(1)
		case "/v1/models":
			e.lists.Add(1)
		}
		inner.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

// holds reports whether the engine lists adapter through its API.
func (e *engine) holds(t *testing.T, adapter string) bool {
	t.Helper()
	ids, err := engineclient.New(nil).Models(context.Background(), "http://"+net.JoinHostPort(e.host, strconv.Itoa(e.port)), e.Config().APIKey)
	if err != nil {
		t.Fatalf("list models of %s: %v", e.host, err)
	}
	return slices.Contains(ids, adapter)
}

// newEnginePod creates a Running, Ready Pod for e labelled with labels.
func newEnginePod(t *testing.T, ns, name string, e *engine, labels map[string]string) *corev1.Pod {
	t.Helper()
	all := map[string]string{v1alpha1.LabelModel: e.Config().Model, v1alpha1.LabelPort: strconv.Itoa(e.port)}
	for k, v := range labels {
		all[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: all},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine-sim"}}},
	}
	ctx := context.Background()
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      e.host,
		PodIPs:     []corev1.PodIP{{IP: e.host}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatalf("update status of pod %s: %v", name, err)
	}
	return pod
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

// runManager starts a manager with the manager cache context and the ModelAdapter
// controller, tuned for tests, and returns a function that stops it and waits.
func runManager(t *testing.T) (stop func()) {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	view, err := cache.InitForManager(mgr)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	r := &Reconciler{
		Client:        mgr.GetClient(),
		Pods:          view,
		Engine:        engineclient.New(&http.Client{Transport: tr, Timeout: 10 * time.Second}),
		ResyncPeriod:  300 * time.Millisecond,
		MinRetryDelay: 50 * time.Millisecond,
		MaxRetryDelay: 300 * time.Millisecond,
		PodEventDelay: 100 * time.Millisecond,
	}
	if err := r.SetupWithManager(mgr); err != nil {
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
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("manager: %v", err)
		}
		tr.CloseIdleConnections()
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond every 25ms and fails t if it does not hold within 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// get reads the current ModelAdapter, or nil once it is gone.
func get(t *testing.T, ns, name string) *v1alpha1.ModelAdapter {
	t.Helper()
	ma := new(v1alpha1.ModelAdapter)
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ma)
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
func waitForStatus(t *testing.T, ns, name, reason string, instances ...string) *v1alpha1.ModelAdapter {
	t.Helper()
	var ma *v1alpha1.ModelAdapter
	waitFor(t, fmt.Sprintf("%s/%s is %s on %v", ns, name, reason, instances), func() bool {
		ma = get(t, ns, name)
		got, _ := readyReason(ma)
		return got == reason && slices.Equal(ma.Status.Instances, instances) &&
			ma.Status.ObservedGeneration == ma.Generation
	})
	return ma
}
