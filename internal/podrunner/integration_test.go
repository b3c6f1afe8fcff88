package podrunner

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/switchboard-llm/switchboard/internal/podrunner/catalogue"
	"github.com/switchboard-llm/switchboard/internal/podrunner/ipam"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// echoImage and simImage are images the default catalogue knows.
const (
	echoImage = catalogue.EchoBasic + ":v1.5.1"
	simImage  = catalogue.EngineSim + ":dev"
)

// programs are the catalogue's binaries, built once per test process.
var programs struct {
	once sync.Once
	dir  string
	err  error
}

// binDir builds echo-basic and engine-sim into a directory of the test process and
// returns it; it skips t when the go tool is not available.
func binDir(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is needed to build echo-basic and engine-sim:", err)
	}
	programs.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if programs.dir, programs.err = os.MkdirTemp("", "podrunner-bin"); programs.err != nil {
			return
		}
		for name, pkg := range map[string]string{
			"echo-basic": "sigs.k8s.io/gateway-api/conformance/echo-basic",
			"engine-sim": "./cmd/engine-sim",
		} {
			cmd := exec.Command(goTool, "build", "-o", filepath.Join(programs.dir, name), pkg)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				programs.err = fmt.Errorf("build %s: %w\n%s", name, err, out)
				return
			}
		}
	})
	if programs.err != nil {
		t.Fatal(programs.err)
	}
	return programs.dir
}

// env is a running control plane with a runner for one node.
type env struct {
	cluster *testenv.Cluster
	client  kubernetes.Interface
	node    string
	state   string
	stop    func() // stops the runner and waits for it
}

// staleDir is the directory of a pod that no longer exists; keptDir is not a pod's.
const (
	staleDir = "ns_gone_0b7a2f4e-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
	keptDir  = "not_a_pod"
)

// podIPRange is the runner's pod IPs in these tests, apart from the demo's.
const podIPRange = "127.0.42.1-127.0.42.254"

// startEnv starts a control plane and a runner for node, stopped when the test ends.
func startEnv(t *testing.T, node string) *env {
	t.Helper()
	bin := binDir(t)
	cluster := testenv.Start(t)
	client, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := ipam.NewPool(podIPRange)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	// What a killed runner left: the directory of a pod that is gone, and another file.
	for _, dir := range []string{staleDir, keptDir} {
		if err := os.Mkdir(filepath.Join(state, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(client, Options{NodeName: node, PodIPs: pool, BinDir: bin, StateDir: state,
		HeartbeatInterval: time.Second, MaxGracePeriod: 2 * time.Second, KubeletAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), zap.New(zap.UseDevMode(true), zap.WriteTo(testWriter{t}))))
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("runner: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("the runner did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	testenv.WaitUntil(t, 30*time.Second, "the runner is ready", func() bool { return r.ReadyCheck(nil) == nil })
	return &env{cluster: cluster, client: client, node: node, state: state, stop: stop}
}

// testWriter writes the runner's logs to the test's log while it runs.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// namespace creates a namespace of its own for the test.
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(ns) > 60 {
		ns = ns[len(ns)-60:]
	}
	ns = strings.Trim(ns, "-")
	if _, err := e.client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// create creates pod.
func (e *env) create(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := e.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// get returns the pod ns/name, or nil once it is gone.
func (e *env) get(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// waitPod waits until cond holds for the pod ns/name and returns it.
func (e *env) waitPod(t *testing.T, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	deadline := time.Now().Add(30 * time.Second)
	for {
		pod = e.get(t, ns, name)
		if pod != nil && cond(pod) {
			return pod
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until pod %s/%s %s; it is %s", ns, name, what, describe(pod))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// describe renders pod's status for failure messages.
func describe(pod *corev1.Pod) string {
	if pod == nil {
		return "gone"
	}
	b, _ := json.MarshalIndent(struct {
		NodeName string
		Status   corev1.PodStatus
	}{pod.Spec.NodeName, pod.Status}, "", " ")
	return string(b)
}

// ready reports whether pod is Running with condition Ready True and a pod IP.
func ready(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" && hasCondition(pod, corev1.PodReady, corev1.ConditionTrue)
}

func hasCondition(pod *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == s
		}
	}
	return false
}

// echoPod is the conformance suite's echo server pod, unscheduled.
func echoPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "echo",
			Image: echoImage,
			Env: []corev1.EnvVar{
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			},
		}}},
	}
}

// echoed is what echo-basic answers.
type echoed struct {
	Path      string `json:"path"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
}

// getEcho sends GET url with client and decodes echo-basic's answer.
func getEcho(t *testing.T, client *http.Client, url string) echoed {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e echoed
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d (%v), want 200 and echo JSON", url, resp.StatusCode, err)
	}
	return e
}

func TestRunner(t *testing.T) {
	e := startEnv(t, "podrunner-test")

	t.Run("NodeIsReadyWithALease", func(t *testing.T) {
		node, err := e.client.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		readyTrue := false
		for _, c := range node.Status.Conditions {
			readyTrue = readyTrue || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		if !readyTrue || node.Labels[corev1.LabelHostname] != e.node || node.Status.Allocatable.Pods().Value() != 1000 {
			t.Errorf("node = %s, want Ready, labelled and with 1000 pods allocatable", describeNode(node))
		}
		var lease *coordinationv1.Lease
		testenv.WaitUntil(t, 10*time.Second, "the lease is renewed", func() bool {
			l, err := e.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), e.node, metav1.GetOptions{})
			if err != nil {
				return false
			}
			if lease == nil {
				lease = l
				return false
			}
			return l.Spec.RenewTime.After(lease.Spec.RenewTime.Time)
		})
	})

	t.Run("StaleDirectoriesAreRemoved", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(e.state, staleDir)); !os.IsNotExist(err) {
			t.Errorf("stale pod directory: %v, want it removed", err)
		}
		if _, err := os.Stat(filepath.Join(e.state, keptDir)); err != nil {
			t.Errorf("a directory that is not a pod's was touched: %v", err)
		}
	})

	t.Run("EchoPodRunsAndAnswers", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, echoPod(ns, "echo"))
		pod := e.waitPod(t, ns, "echo", "is Running and Ready", ready)

		if pod.Spec.NodeName != e.node || pod.Status.HostIP != hostIP || len(pod.Status.PodIPs) != 1 || pod.Status.StartTime == nil {
			t.Errorf("pod = %s, want bound to %s with host IP, pod IPs and start time", describe(pod), e.node)
		}
		for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			if !hasCondition(pod, c, corev1.ConditionTrue) {
				t.Errorf("condition %s is not True: %s", c, describe(pod))
			}
		}
		cs := pod.Status.ContainerStatuses
		if len(cs) != 1 || !cs[0].Ready || cs[0].State.Running == nil || cs[0].Started == nil || !*cs[0].Started || cs[0].Image != echoImage {
			t.Errorf("container statuses = %+v, want echo running, started and ready", cs)
		}

		client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
		defer client.CloseIdleConnections()
		got := getEcho(t, client, "http://"+net.JoinHostPort(pod.Status.PodIP, "3000")+"/hello")
		if got.Pod != "echo" || got.Namespace != ns || got.Path != "/hello" {
			t.Errorf("echo = %+v, want pod echo in namespace %s at /hello", got, ns)
		}
		// The h2c port is published too.
		if !accepts(context.Background(), net.JoinHostPort(pod.Status.PodIP, "3001")) {
			t.Error("the h2c port 3001 is not published on the pod IP")
		}
		if _, err := os.Stat(filepath.Join(e.state, ns+"_echo_"+string(pod.UID), "echo.log")); err != nil {
			t.Errorf("container log: %v", err)
		}
	})

	t.Run("NodeAdvertisesItsKubeletEndpoint", func(t *testing.T) {
		node, err := e.client.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
		want := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		if !slices.Equal(node.Status.Addresses, want) || port == 0 {
			t.Fatalf("addresses %v, kubelet port %d; want %v and the bound port", node.Status.Addresses, port, want)
		}
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the endpoint's certificate is self-signed
		defer client.CloseIdleConnections()
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/containerLogs/default/nope/c", port))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("logs of an unknown pod = %d, want 404", resp.StatusCode)
		}
	})

	t.Run("LogsThroughTheAPIServer", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, echoPod(ns, "echo"))
		pod := e.waitPod(t, ns, "echo", "is Running and Ready", ready)
		client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
		defer client.CloseIdleConnections()
		echo := func(path string) { getEcho(t, client, "http://"+net.JoinHostPort(pod.Status.PodIP, "3000")+path) }
		logs := func(opts *corev1.PodLogOptions) string {
			b, err := e.client.CoreV1().Pods(ns).GetLogs("echo", opts).DoRaw(context.Background())
			if err != nil {
				t.Fatalf("get logs: %v", err)
			}
			return string(b)
		}
		logged := func(path string) string { return "Echoing back request made to " + path + " to client" }

		// As the conformance suite reads a backend's logs: sinceTime, in whole seconds.
		echo("/before")
		testenv.WaitUntil(t, 10*time.Second, "the first request is logged", func() bool {
			return strings.Contains(logs(&corev1.PodLogOptions{Container: "echo"}), logged("/before"))
		})
		time.Sleep(1100 * time.Millisecond)
		since := metav1.Now()
		echo("/after")
		var got string
		testenv.WaitUntil(t, 10*time.Second, "the request after since is logged", func() bool {
			got = logs(&corev1.PodLogOptions{Container: "echo", SinceTime: &since})
			return strings.Contains(got, logged("/after"))
		})
		if strings.Contains(got, logged("/before")) {
			t.Errorf("logs since %v = %q, want no line from before", since, got)
		}

		// Following from the end sees the next request.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stream, err := e.client.CoreV1().Pods(ns).GetLogs("echo", &corev1.PodLogOptions{
			Container: "echo", Follow: true, TailLines: ptr.To[int64](0)}).Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		echo("/followed")
		lines, found := bufio.NewScanner(stream), false
		for !found && lines.Scan() {
			found = strings.Contains(lines.Text(), logged("/followed"))
		}
		if !found {
			t.Errorf("the followed log ended without the next request: %v", lines.Err())
		}

		// kubectl logs, with timestamps.
		out, err := exec.Command(testenv.Kubectl(), "--kubeconfig", e.cluster.Kubeconfig(t, "kubectl"),
			"logs", "--namespace", ns, "echo", "--timestamps", "--tail", "3").CombinedOutput()
		line := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT[0-9:.]+Z ` + logged("/after") + ` \(`)
		if err != nil || !line.Match(out) {
			t.Errorf("kubectl logs --timestamps = %v:\n%s\nwant a line with a timestamp and the request to /after", err, out)
		}
	})

	t.Run("EchoServesTLSFromASecretVolume", func(t *testing.T) {
		ns := e.namespace(t)
		certPEM, keyPEM := selfSigned(t)
		if _, err := e.client.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tls-checks-certificate"},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// As the conformance suite's tls-backend: a secret volume with items, and env
		// values that are paths under its mount.
		pod := echoPod(ns, "tls-backend")
		c := &pod.Spec.Containers[0]
		c.Env = append(c.Env,
			corev1.EnvVar{Name: "TLS_SERVER_CERT", Value: "/etc/secret-volume/crt"},
			corev1.EnvVar{Name: "TLS_SERVER_PRIVKEY", Value: "/etc/secret-volume/key"})
		c.VolumeMounts = []corev1.VolumeMount{{Name: "secret-volume", MountPath: "/etc/secret-volume"}}
		pod.Spec.Volumes = []corev1.Volume{{Name: "secret-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "tls-checks-certificate",
			Items:      []corev1.KeyToPath{{Key: "tls.crt", Path: "crt"}, {Key: "tls.key", Path: "key"}},
		}}}}
		e.create(t, pod)
		pod = e.waitPod(t, ns, "tls-backend", "is Running and Ready", ready)

		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed test certificate
		defer client.CloseIdleConnections()
		got := getEcho(t, client, "https://"+net.JoinHostPort(pod.Status.PodIP, "8443")+"/secure")
		if got.Pod != "tls-backend" || got.Path != "/secure" {
			t.Errorf("echo over TLS = %+v, want pod tls-backend at /secure", got)
		}
	})

	t.Run("UnknownImageNeverRuns", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dns"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.12.2"}}},
		})
		pod := e.waitPod(t, ns, "dns", "waits with ErrImagePull", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "ErrImagePull"
		})
		msg := pod.Status.ContainerStatuses[0].State.Waiting.Message
		if !strings.Contains(msg, "coredns") || !strings.Contains(msg, catalogue.EchoBasic) {
			t.Errorf("message %q should name the image and the known ones", msg)
		}
		time.Sleep(time.Second)
		pod = e.get(t, ns, "dns")
		if pod.Status.Phase != corev1.PodPending || !hasCondition(pod, corev1.PodReady, corev1.ConditionFalse) || pod.Status.PodIP != "" {
			t.Errorf("pod = %s (IP %q), want Pending and not Ready, without an address", describe(pod), pod.Status.PodIP)
		}
	})

	t.Run("InitContainersKeepThePodPending", func(t *testing.T) {
		ns := e.namespace(t)
		pod := echoPod(ns, "init")
		pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: echoImage}}
		e.create(t, pod)
		pod = e.waitPod(t, ns, "init", "reports Initialized=False", func(p *corev1.Pod) bool {
			return hasCondition(p, corev1.PodInitialized, corev1.ConditionFalse)
		})
		if w := pod.Status.ContainerStatuses[0].State.Waiting; pod.Status.Phase != corev1.PodPending || w == nil || w.Reason != "PodInitializing" {
			t.Errorf("pod = %s, want Pending with its container PodInitializing", describe(pod))
		}
	})

	t.Run("EngineSimListensOnThePodIPAndIsProbed", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "engine"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:    "engine",
				Image:   simImage,
				Command: []string{"/usr/bin/ignored"},
				Args:    []string{"--model", "$(MODEL)"},
				Env:     []corev1.EnvVar{{Name: "MODEL", Value: "sim-model"}},
				Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8123}},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}}},
			}}},
		})
		pod := e.waitPod(t, ns, "engine", "is Running and Ready", ready)
		client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
		defer client.CloseIdleConnections()
		resp, err := client.Get("http://" + net.JoinHostPort(pod.Status.PodIP, "8123") + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"sim-model"`) {
			t.Errorf("GET /v1/models = %d %s, want 200 listing sim-model", resp.StatusCode, body)
		}
	})

	t.Run("CrashingContainerRestartsWithBackOff", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, crashingPod(ns, "crash", corev1.RestartPolicyAlways))
		pod := e.waitPod(t, ns, "crash", "has restarted", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].RestartCount >= 1 && cs[0].LastTerminationState.Terminated != nil
		})
		last := pod.Status.ContainerStatuses[0].LastTerminationState.Terminated
		if last.ExitCode == 0 || last.Reason != "Error" || !strings.Contains(last.Message, "no-such-flag") {
			t.Errorf("last termination = %+v, want a non-zero exit with the log's end as message", last)
		}
		if pod.Status.Phase != corev1.PodRunning || hasCondition(pod, corev1.PodReady, corev1.ConditionTrue) {
			t.Errorf("pod = %s, want Running and not Ready", describe(pod))
		}
		e.waitPod(t, ns, "crash", "backs off", func(p *corev1.Pod) bool {
			w := p.Status.ContainerStatuses[0].State.Waiting
			return w != nil && w.Reason == "CrashLoopBackOff"
		})
		testenv.WaitUntil(t, 30*time.Second, "the previous run's log is served", func() bool {
			b, err := e.client.CoreV1().Pods(ns).GetLogs("crash", &corev1.PodLogOptions{Previous: true}).DoRaw(context.Background())
			return err == nil && strings.Contains(string(b), "no-such-flag")
		})
	})

	t.Run("FailedContainerThatNeverRestartsFailsThePod", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, crashingPod(ns, "once", corev1.RestartPolicyNever))
		pod := e.waitPod(t, ns, "once", "has failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		cs := pod.Status.ContainerStatuses[0]
		if cs.RestartCount != 0 || cs.State.Terminated == nil || cs.State.Terminated.ExitCode == 0 || cs.Ready {
			t.Errorf("container status = %+v, want terminated with an error, never restarted", cs)
		}
	})

	t.Run("PodsOfOtherNodesAndSchedulersAreLeftAlone", func(t *testing.T) {
		ns := e.namespace(t)
		other := echoPod(ns, "other-node")
		other.Spec.NodeName = "elsewhere"
		custom := echoPod(ns, "other-scheduler")
		custom.Spec.SchedulerName = "custom-scheduler"
		unmatched := echoPod(ns, "other-selector")
		unmatched.Spec.NodeSelector = map[string]string{"gpu": "true"}
		for _, p := range []*corev1.Pod{other, custom, unmatched} {
			e.create(t, p)
		}
		// A pod created after them is running, so the runner has seen them.
		e.create(t, echoPod(ns, "mine"))
		e.waitPod(t, ns, "mine", "is Running and Ready", ready)
		for name, node := range map[string]string{"other-node": "elsewhere", "other-scheduler": "", "other-selector": ""} {
			pod := e.get(t, ns, name)
			if pod.Spec.NodeName != node || len(pod.Status.ContainerStatuses) != 0 || pod.Status.PodIP != "" {
				t.Errorf("pod %s = %s, want untouched on node %q", name, describe(pod), node)
			}
		}
	})

	t.Run("DeletionStopsTheProcessAndDeletesThePod", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, echoPod(ns, "doomed"))
		pod := e.waitPod(t, ns, "doomed", "is Running and Ready", ready)
		pid := containerPID(t, pod)
		dir := filepath.Join(e.state, ns+"_doomed_"+string(pod.UID))
		addr := net.JoinHostPort(pod.Status.PodIP, "3000")

		if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitUntil(t, 30*time.Second, "the pod is deleted", func() bool { return e.get(t, ns, "doomed") == nil })
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists (kill 0: %v)", pid, err)
		}
		if accepts(context.Background(), addr) {
			t.Errorf("%s still accepts connections", addr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("pod directory %s: %v, want it removed", dir, err)
		}
	})

	// Last: it stops the runner.
	t.Run("StoppingTheRunnerStopsItsProcessesAndTheNode", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, echoPod(ns, "survivor"))
		pod := e.waitPod(t, ns, "survivor", "is Running and Ready", ready)
		pid := containerPID(t, pod)

		e.stop()
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d outlived the runner (kill 0: %v)", pid, err)
		}
		pod = e.get(t, ns, "survivor")
		if pod == nil || hasCondition(pod, corev1.PodReady, corev1.ConditionTrue) || pod.Status.ContainerStatuses[0].State.Terminated == nil {
			t.Errorf("pod = %s, want kept, not Ready, its container terminated", describe(pod))
		}
		node, err := e.client.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionFalse {
				t.Errorf("node Ready = %s after the runner stopped, want False", c.Status)
			}
		}
	})
}

// crashingPod is a pod whose engine-sim exits at once, on a bad flag.
func crashingPod(ns, name string, policy corev1.RestartPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{{
			Name: "engine", Image: simImage, Args: []string{"--no-such-flag"}}}},
	}
}

// containerPID returns the process ID of pod's first container.
func containerPID(t *testing.T, pod *corev1.Pod) int {
	t.Helper()
	id := pod.Status.ContainerStatuses[0].ContainerID
	pid, err := strconv.Atoi(strings.TrimPrefix(id, "pod-runner://"))
	if err != nil {
		t.Fatalf("container ID %q: %v", id, err)
	}
	return pid
}

// selfSigned returns a PEM certificate and key for any name.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "example.com"},
		DNSNames:     []string{"example.com"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func describeNode(node *corev1.Node) string {
	b, _ := json.MarshalIndent(node, "", " ")
	return string(b)
}
