// Package manifests_test checks what `kustomize build config/default` installs: that a
// real API server accepts every object (kubectl apply --dry-run=server with strict field
// validation), and that each Deployment runs its binary with flags that binary has, the
// flags hack/demo.sh runs it with, and the same ports.
package manifests_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

const namespace = "switchboard-system"

// root is the repository root, found from this file's path.
var root = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}()

// deployments maps each binary to its Deployment in config/default.
var deployments = map[string]string{
	"manager":          "switchboard-manager",
	"gateway":          "switchboard-gateway",
	"metadata-service": "switchboard-metadata-service",
}

// notInCluster are the demo's flags a Deployment leaves out, with the reason.
var notInCluster = map[string]string{
	"kubeconfig": "in a cluster the Pod's service account is used",
}

// inClusterOnly are the flags a Deployment passes that the demo does not, by binary, with
// their value and the reason.
var inClusterOnly = map[string]map[string][2]string{
	"gateway": {"listen-host": {"0.0.0.0", "a Pod cannot hold its Gateways' addresses and is reached through the Service, " +
		"so it binds their listener ports on every interface; the demo serves each Gateway on its own loopback address"}},
}

// clusterValues are the flags both the demo and a Deployment pass, with other values, by
// binary: the Deployment's value and the reason.
var clusterValues = map[string]map[string][2]string{
	"manager": {"gateway-status-endpoints": {"switchboard-gateway-status.switchboard-system.svc:8081",
		"the headless Service's name resolves to every gateway replica; the demo's one gateway is on loopback"}},
}

func TestDefaultManifests(t *testing.T) {
	out := kustomizeBuild(t, "config/default")
	deps, svcs := parse(t, out, namespace)

	t.Run("ServerDryRun", func(t *testing.T) {
		c := testenv.Start(t)
		// A dry-run Namespace is not persisted, so the namespaced objects need a real one.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
		c.Create(t, ns)
		res := serverDryRun(t, c, out)
		for _, d := range deps {
			if want := "deployment.apps/" + d.Name + " created (server dry run)"; !strings.Contains(string(res), want) {
				t.Errorf("kubectl output lacks %q:\n%s", want, res)
			}
		}
		t.Logf("kubectl apply --dry-run=server:\n%s", res)
	})

	demo := demoArgs(t)
	for bin, name := range deployments {
		t.Run(bin, func(t *testing.T) {
			d, ok := deps[name]
			if !ok {
				t.Fatalf("no Deployment %s in kustomize build config/default", name)
			}
			checkDeployment(t, bin, d, svcs, demo[bin])
		})
	}
}

// checkDeployment checks d, the Deployment of bin, against the binary's own flags, the
// flags and ports hack/demo.sh runs it with (demoFlags), and the Services in svcs.
func checkDeployment(t *testing.T, bin string, d *appsv1.Deployment, svcs []*corev1.Service, demoFlags map[string]string) {
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	ctr := spec.Containers[0]
	if ctr.Image != "switchboard:dev" || !slices.Equal(ctr.Command, []string{"/" + bin}) {
		t.Errorf("image %q command %q, want switchboard:dev [/%s] (the Dockerfile installs each binary at /<name>)", ctr.Image, ctr.Command, bin)
	}
	if want := "switchboard-" + bin; spec.ServiceAccountName != want {
		t.Errorf("serviceAccountName %q, want %q (config/rbac)", spec.ServiceAccountName, want)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("pod securityContext lacks runAsNonRoot: true")
	}
	if sc := ctr.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("container securityContext lacks readOnlyRootFilesystem: true")
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := ctr.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
		if _, ok := ctr.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
	}

	// Every flag in args is a flag of the binary.
	args := parseArgs(t, ctr.Args)
	known := binaryFlags(t, bin)
	for f := range args {
		if !known[f] {
			t.Errorf("args pass --%s, which %s does not define (%s --help)", f, bin, bin)
		}
	}
	// Every flag the demo passes is in args, with the demo's port bound on every interface.
	if len(demoFlags) == 0 {
		t.Fatalf("found no flags for %s in hack/demo.sh", bin)
	}
	for f, want := range inClusterOnly[bin] {
		if _, ok := demoFlags[f]; ok {
			t.Errorf("hack/demo.sh passes --%s, which only a Deployment should: %s", f, want[1])
		}
		if got := args[f]; got != want[0] {
			t.Errorf("--%s=%q, want %s: %s", f, got, want[0], want[1])
		}
	}
	for f, demoVal := range demoFlags {
		if _, skip := notInCluster[f]; skip {
			if _, ok := args[f]; ok {
				t.Errorf("args pass --%s; in a cluster it is left out: %s", f, notInCluster[f])
			}
			continue
		}
		got, ok := args[f]
		cluster, differs := clusterValues[bin][f]
		switch {
		case !ok:
			t.Errorf("args lack --%s, which hack/demo.sh passes (%s)", f, demoVal)
		case differs:
			if got != cluster[0] {
				t.Errorf("--%s=%s, want %s: %s", f, got, cluster[0], cluster[1])
			}
		case strings.HasSuffix(f, "-address"):
			_, port, _ := strings.Cut(demoVal, ":")
			if got != ":"+port {
				t.Errorf("--%s=%s, want :%s (the demo's %s on every interface)", f, got, port, demoVal)
			}
		case got != demoVal:
			t.Errorf("--%s=%s, want %s as in hack/demo.sh", f, got, demoVal)
		}
	}
	if bin == "manager" {
		checkGatewayStatusService(t, args["gateway-status-endpoints"], svcs)
		if v, ok := args["leader-elect"]; ok && v != "true" {
			t.Errorf("--leader-elect=%s, want leader election on", v)
		}
		if args["leader-election-namespace"] != d.Namespace {
			t.Errorf("--leader-election-namespace=%s, want the Deployment's namespace %s", args["leader-election-namespace"], d.Namespace)
		}
	}

	// Every bound address has a containerPort; the probes use the probe port.
	ports := map[string]int32{} // name -> containerPort
	byNumber := map[int32]bool{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
		byNumber[p.ContainerPort] = true
	}
	for f, v := range args {
		if !strings.HasSuffix(f, "-address") {
			continue
		}
		if !byNumber[portOf(t, v)] {
			t.Errorf("--%s=%s has no containerPort", f, v)
		}
	}
	probePort := portOf(t, args["health-probe-bind-address"])
	for name, probe := range map[string]*corev1.Probe{"/healthz": ctr.LivenessProbe, "/readyz": ctr.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("no HTTP probe on %s", name)
			continue
		}
		if probe.HTTPGet.Path != name || resolve(probe.HTTPGet.Port, ports) != probePort {
			t.Errorf("probe %s:%s, want %s on port %d", probe.HTTPGet.Path, probe.HTTPGet.Port.String(), name, probePort)
		}
	}

	// The Services selecting these Pods target container ports that exist.
	served := map[int32]bool{}
	for _, s := range svcs {
		if !selects(s.Spec.Selector, d.Spec.Template.Labels) {
			continue
		}
		for _, p := range s.Spec.Ports {
			target := resolve(p.TargetPort, ports)
			if !byNumber[target] {
				t.Errorf("Service %s port %s targets %s, which is no containerPort", s.Name, p.Name, p.TargetPort.String())
			}
			served[target] = true
		}
	}
	want := []int32{portOf(t, args["metrics-bind-address"])}
	switch bin {
	case "gateway":
		want = append(want, 8080, portOf(t, args["ext-proc-bind-address"]))
	case "metadata-service":
		want = append(want, portOf(t, args["bind-address"]))
	}
	for _, p := range want {
		if !served[p] {
			t.Errorf("no Service exposes port %d", p)
		}
	}
}

// checkGatewayStatusService checks that the manager's --gateway-status-endpoints
// (endpoint) names a headless Service of svcs that selects the gateway's Pods, on the
// port of their metrics endpoint.
func checkGatewayStatusService(t *testing.T, endpoint string, svcs []*corev1.Service) {
	t.Helper()
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatalf("--gateway-status-endpoints=%s: %v", endpoint, err)
	}
	name, namespace, _ := strings.Cut(strings.TrimSuffix(host, ".svc"), ".")
	for _, s := range svcs {
		if s.Name != name || s.Namespace != namespace {
			continue
		}
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("Service %s/%s is not headless: its name resolves to one virtual IP, not to every gateway replica", namespace, name)
		}
		if s.Spec.Selector["app.kubernetes.io/component"] != "gateway" {
			t.Errorf("Service %s/%s selects %v, not the gateway's Pods", namespace, name, s.Spec.Selector)
		}
		if len(s.Spec.Ports) != 1 || fmt.Sprint(s.Spec.Ports[0].Port) != port || s.Spec.Ports[0].TargetPort.String() != "metrics" {
			t.Errorf("Service %s/%s ports %+v, want %s to the gateway's metrics port", namespace, name, s.Spec.Ports, port)
		}
		return
	}
	t.Errorf("--gateway-status-endpoints=%s names no Service of config/default", endpoint)
}

// TestInferenceExtensionSamples checks config/samples/gie, Switchboard as the endpoint
// picker of an InferencePool behind an Envoy-based gateway: a real API server with the
// Inference Extension's CRD accepts every object, and the picker's Deployment runs the
// gateway binary with flags it has.
func TestInferenceExtensionSamples(t *testing.T) {
	out := kustomizeBuild(t, "config/samples/gie")
	res := serverDryRun(t, testenv.Start(t), out)
	for _, want := range []string{"inferencepool.inference.networking.k8s.io/llama-3-8b created (server dry run)",
		"deployment.apps/switchboard-epp created (server dry run)", "httproute.gateway.networking.k8s.io/llama-3-8b-pool created (server dry run)"} {
		if !strings.Contains(string(res), want) {
			t.Errorf("kubectl output lacks %q:\n%s", want, res)
		}
	}
	deps, _ := parse(t, out, "default")
	d, ok := deps["switchboard-epp"]
	if !ok {
		t.Fatal("no Deployment switchboard-epp in config/samples/gie")
	}
	known := binaryFlags(t, "gateway")
	for f := range parseArgs(t, d.Spec.Template.Spec.Containers[0].Args) {
		if !known[f] {
			t.Errorf("the picker's args pass --%s, which gateway does not define", f)
		}
	}
}

// serverDryRun applies the manifests out to c with kubectl apply --dry-run=server and
// strict field validation, failing t if the API server refuses any, and returns
// kubectl's output.
func serverDryRun(t *testing.T, c *testenv.Cluster, out []byte) []byte {
	t.Helper()
	cmd := exec.Command(testenv.Kubectl(), "--kubeconfig", c.Kubeconfig(t, "admin"),
		"apply", "--dry-run=server", "--validate=strict", "-f", "-")
	cmd.Stdin = bytes.NewReader(out)
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, res)
	}
	return res
}

// kustomizeBuild runs bin/kustomize build on dir, relative to the repository root.
func kustomizeBuild(t *testing.T, dir string) []byte {
	t.Helper()
	kustomize := filepath.Join(root, "bin", "kustomize")
	if _, err := os.Stat(kustomize); err != nil {
		t.Fatalf("%v (make tools installs it)", err)
	}
	cmd := exec.Command(kustomize, "build", filepath.Join(root, dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.Bytes())
	}
	return out
}

// parse returns the Deployments (by name), all in namespace ns, and the Services of a
// multi-document YAML stream; unknown fields are left to the API server's strict
// validation in serverDryRun.
func parse(t *testing.T, out []byte, ns string) (map[string]*appsv1.Deployment, []*corev1.Service) {
	t.Helper()
	deps := map[string]*appsv1.Deployment{}
	var svcs []*corev1.Service
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("parse kustomize output: %v", err)
		}
		switch tm.Kind {
		case "Deployment":
			d := &appsv1.Deployment{}
			if err := yaml.Unmarshal([]byte(doc), d); err != nil {
				t.Fatalf("parse Deployment: %v", err)
			}
			if d.Namespace != ns {
				t.Errorf("Deployment %s in namespace %q, want %s", d.Name, d.Namespace, ns)
			}
			deps[d.Name] = d
		case "Service":
			s := &corev1.Service{}
			if err := yaml.Unmarshal([]byte(doc), s); err != nil {
				t.Fatalf("parse Service: %v", err)
			}
			svcs = append(svcs, s)
		}
	}
	return deps, svcs
}

// parseArgs maps each "--name=value" or "--name value" argument to its value ("true" for
// a bare boolean flag).
func parseArgs(t *testing.T, args []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("argument %q is not a flag", a)
			continue
		}
		name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok {
			val = "true"
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				val = args[i+1]
				i++
			}
		}
		if _, dup := m[name]; dup {
			t.Errorf("flag --%s given twice", name)
		}
		m[name] = val
	}
	return m
}

// binaryFlags builds cmd/<bin> and returns the flag names its --help lists.
func binaryFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	path := testenv.Build(t, bin)
	out, err := exec.Command(path, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", bin, err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([A-Za-z0-9][A-Za-z0-9_.-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["metrics-bind-address"] {
		t.Fatalf("%s --help lists no --metrics-bind-address; cannot read its flags:\n%s", bin, out)
	}
	return flags
}

// demoArgs reads the flags hack/demo.sh starts manager, gateway and metadata-service
// with: binary -> flag name -> value.
func demoArgs(t *testing.T) map[string]map[string]string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "hack", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.ReplaceAll(string(src), "\\\n", " ")
	res := map[string]map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^start (manager|gateway|metadata-service) (.*)$`).FindAllStringSubmatch(joined, -1) {
		fields := strings.Fields(m[2])
		flags := map[string]string{}
		for i := 0; i < len(fields); i++ {
			if !strings.HasPrefix(fields[i], "--") {
				continue
			}
			name, val, ok := strings.Cut(strings.TrimPrefix(fields[i], "--"), "=")
			if !ok {
				val = "true"
				if i+1 < len(fields) && !strings.HasPrefix(fields[i+1], "-") {
					val = strings.Trim(fields[i+1], `"`)
					i++
				}
			}
			flags[name] = val
		}
		res[m[1]] = flags
	}
	for bin := range deployments {
		if _, ok := res[bin]; !ok {
			t.Fatalf("hack/demo.sh starts no %s", bin)
		}
	}
	return res
}

// portOf returns the port of a "host:port" address.
func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	n, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil || n <= 0 || n > 65535 {
		t.Fatalf("address %q has no port", addr)
	}
	return int32(n)
}

// resolve returns the number of a port given by number or by container port name.
func resolve(p intstr.IntOrString, named map[string]int32) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	return named[p.StrVal]
}

// selects reports whether selector matches labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
