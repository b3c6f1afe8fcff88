package testenv

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
	"github.com/switchboard-llm/switchboard/internal/scheme"
)

// Create creates every object, failing t on the first error.
func (c *Cluster) Create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		if err := c.Client.Create(context.Background(), obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// EnginePort is the name of the container port of EnginePod's pods, which
// EngineService's Services target.
const EnginePort = "http"

// EnginePod registers a Pod in ns serving model with its engine at addr ("ip:port"),
// labelled with labels too, and marks it Running and Ready with podIP ip, as a kubelet
// would. Its container port EnginePort is the engine's port.
func (c *Cluster) EnginePod(t testing.TB, ns, name, model, addr string, labels map[string]string) *corev1.Pod {
	t.Helper()
	return c.EnginePodReady(t, ns, name, model, addr, labels, true)
}

// EnginePodReady is EnginePod with the pod marked Ready or not: a pod registered
// NotReady is never seen Ready before SetPodReady says so.
func (c *Cluster) EnginePodReady(t testing.TB, ns, name, model, addr string, labels map[string]string, ready bool) *corev1.Pod {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	portNumber, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{v1alpha1.LabelModel: model, v1alpha1.LabelPort: port}
	for k, v := range labels {
		all[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: all},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine-sim",
			Ports: []corev1.ContainerPort{{Name: EnginePort, ContainerPort: int32(portNumber)}}}}},
	}
	c.Create(t, pod)
	c.SetPodReady(t, pod, host, ready)
	return pod
}

// EngineService returns a Service ns/name selecting pods by selector, whose port 8000
// targets the EnginePort of EnginePod's pods, whatever port each engine listens on.
func EngineService(ns, name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{
			{Name: EnginePort, Port: 8000, TargetPort: intstr.FromString(EnginePort)}}},
	}
}

// SetPodReady makes pod Running at ip with condition Ready set to ready.
func (c *Cluster) SetPodReady(t testing.TB, pod *corev1.Pod, ip string, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      ip,
		PodIPs:     []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
	}
	if err := c.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("update status of pod %s: %v", pod.Name, err)
	}
}

// RunManager builds a controller-runtime manager on the cluster (metrics and probes
// off), lets setup add to it, and runs it until the test ends, checking that it stops
// cleanly.
func (c *Cluster) RunManager(t testing.TB, setup func(ctrl.Manager) error) {
	t.Helper()
	c.RunManagerWith(t, ctrl.Options{}, setup)
}

// RunManagerWith is RunManager with the manager's other options, such as leader
// election, taken from opts.
func (c *Cluster) RunManagerWith(t testing.TB, opts ctrl.Options, setup func(ctrl.Manager) error) {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	opts.Scheme = s
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.HealthProbeBindAddress = "0"
	// Tests run several managers with the same controllers in one process.
	opts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	mgr, err := ctrl.NewManager(c.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
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
}

// InProcessEngine serves an engine simulator configured by cfg on a free port of host
// (a 127.0.0.x address) inside the test process until the test ends, and returns its
// address.
func InProcessEngine(t testing.TB, host string, cfg enginesim.Config) (*enginesim.Engine, string) {
	t.Helper()
	e, err := enginesim.NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln := Listen(t, host)
	srv := &http.Server{Handler: e.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e, ln.Addr().String()
}

// engineSim is the engine-sim binary shared by the tests of one test process.
var engineSim struct {
	once sync.Once
	path string
	err  error
}

// EngineProcess runs an engine-sim process for model on a free port of host with the
// extra flags until the test ends, waits until it is healthy and returns its address.
// The binary is built once per test process, into bin/test.
func EngineProcess(t testing.TB, host, model string, flags ...string) string {
	t.Helper()
	return EngineProcessAt(t, FreeAddr(t, host), model, flags...)
}

// EngineProcessAt is EngineProcess on addr ("ip:port"), for engines that must share a
// port.
func EngineProcessAt(t testing.TB, addr, model string, flags ...string) string {
	t.Helper()
	engineSim.once.Do(func() {
		// Test processes of several packages may build at once: each builds to a file of
		// its own and renames it into place, which is atomic.
		engineSim.path = filepath.Join(root, "bin", "test", "engine-sim")
		tmp := engineSim.path + "." + strconv.Itoa(os.Getpid())
		if engineSim.err = buildTo(tmp, "engine-sim"); engineSim.err == nil {
			engineSim.err = os.Rename(tmp, engineSim.path)
		}
	})
	if engineSim.err != nil {
		t.Fatal(engineSim.err)
	}
	Run(t, engineSim.path, append([]string{"--listen", addr, "--model", model}, flags...)...)
	WaitUntil(t, 30*time.Second, "engine-sim on "+addr+" is healthy", func() bool {
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr
}
