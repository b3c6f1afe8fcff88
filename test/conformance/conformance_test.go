package conformance

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/yaml"

	"github.com/switchboard-llm/switchboard/internal/controller/gatewaystatus"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

var (
	enabled = flag.Bool("switchboard.conformance", false,
		"run the upstream Gateway API conformance suite (make conformance sets it; the suite's own flags, such as -run-test and -report-output, apply)")
	summaryPath = flag.String("switchboard.summary", "",
		"file to write a Markdown table of every test's result to (make conformance: docs/conformance/README.md)")
	gatewayAddresses = flag.String("switchboard.gateway-addresses", "127.0.1.1-127.0.1.254",
		"the manager's --gateway-address-pool, from which the suite's Gateways get their addresses")
	usableAddress = flag.String("switchboard.usable-address", "127.0.3.1",
		"an address of this machine outside -switchboard.gateway-addresses and -switchboard.pod-ips, for GatewayStaticAddresses (the suite's -usable-address, when set, wins)")
	podIPs = flag.String("switchboard.pod-ips", "127.0.2.1-127.0.2.254",
		"the pod runner's --pod-ip-range; HTTPRouteServiceTypes needs addresses outside 127.0.0.0/8, which the API server refuses in EndpointSlices (hack/conformance.sh provides them)")
	binDir = flag.String("switchboard.bin-dir", "",
		"directory holding the binaries of commands, built beforehand (hack/conformance.sh builds them outside the network namespace); empty builds them")
	logDir = flag.String("switchboard.log-dir", "",
		"directory for the logs of the processes the suite runs against (default: a temporary directory, removed afterwards)")
)

// commands are the binaries the run needs: the processes under test, the pod runner and
// the programs it runs.
var commands = []string{"./cmd/manager", "./cmd/gateway", "./cmd/pod-runner", "./cmd/engine-sim",
	"sigs.k8s.io/gateway-api/conformance/echo-basic"}

// controllerName is the GatewayClass controller name Switchboard's manager and gateway
// serve.
const controllerName = "switchboard.dev/gateway-controller"

// baseManifests is where the suite reads its base manifests in manifests().
const baseManifests = "switchboard/base.yaml"

// TestGatewayAPIConformance runs the Gateway API conformance suite against Switchboard:
// a real kube-apiserver and etcd (envtest) with kube-controller-manager, the pod runner
// playing kubelet for the suite's echo-basic Deployments, and the manager and gateway
// processes as a user runs them. Every process ends with the test.
func TestGatewayAPIConformance(t *testing.T) {
	if !*enabled {
		t.Skip("the conformance suite runs with make conformance (go test -args -switchboard.conformance)")
	}
	start := time.Now()
	cluster := testenv.Start(t)
	kubeconfig := cluster.Kubeconfig(t, "conformance")
	logs := *logDir
	if logs == "" {
		logs = t.TempDir()
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := func(name string) *os.File {
		f, err := os.Create(filepath.Join(logs, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	t.Logf("logs of the processes under test: %s", logs)

	bin := *binDir
	if bin == "" {
		bin = testenv.BuildCommands(t, commands...)
	}
	run := func(name string, args ...string) {
		p := testenv.RunTo(t, logFile(name), filepath.Join(bin, name), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		// Registered after RunTo's kill, so it runs first: the processes stop gracefully,
		// the pod runner stopping every program it started.
		t.Cleanup(func() { _ = p.Stop(t, 30*time.Second) })
	}
	loopback := func() string { return testenv.FreeAddr(t, "127.0.0.1") }

	testenv.RunControllerManager(t, logFile("kube-controller-manager"), kubeconfig)
	run("pod-runner", "--bin-dir", bin, "--state-dir", filepath.Join(logs, "pods"), "--pod-ip-range", *podIPs,
		"--kubelet-bind-address", "127.0.0.1:0", "--health-probe-bind-address", loopback())
	gatewayMetrics := loopback()
	run("manager", "--leader-elect=false", "--gateway-address-pool", *gatewayAddresses, "--gateway-status-endpoints", gatewayMetrics,
		"--metrics-bind-address", "0", "--health-probe-bind-address", loopback())
	run("gateway", "--metrics-bind-address", gatewayMetrics, "--health-probe-bind-address", loopback(), "--drain-timeout", "5s")

	t.Setenv("KUBECONFIG", kubeconfig)
	opts := conformance.DefaultOptions(t)
	if len(opts.ConformanceProfiles) == 0 {
		opts.ConformanceProfiles = []suite.ConformanceProfileName{suite.GatewayHTTPConformanceProfileName}
	}
	if len(opts.SupportedFeatures) == 0 && !opts.EnableAllSupportedFeatures {
		// What the manager publishes in the GatewayClass's status.supportedFeatures, given
		// explicitly so that -run-test, which turns off the suite's inference, runs too.
		opts.SupportedFeatures = gatewaystatus.SupportedFeatures
	}
	// GatewayStaticAddresses: an address of this machine outside the Gateway address pool,
	// and one that is not this machine's (TEST-NET-3), unless the suite's flags name them.
	if len(opts.UsableNetworkAddresses) == 0 {
		opts.UsableNetworkAddresses = []gatewayv1.GatewaySpecAddress{{Type: new(gatewayv1.IPAddressType), Value: *usableAddress}}
	}
	if len(opts.UnusableNetworkAddresses) == 0 {
		opts.UnusableNetworkAddresses = []gatewayv1.GatewaySpecAddress{{Type: new(gatewayv1.IPAddressType), Value: "203.0.113.1"}}
	}
	opts.Implementation = implementation(opts.Implementation)
	opts.ManifestFS = []fs.FS{manifests(t), &conformance.Manifests}
	opts.BaseManifests = baseManifests

	cluster.Create(t, &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: opts.GatewayClassName},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: controllerName},
	})
	t.Cleanup(func() {
		_ = cluster.Delete(context.Background(), &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: opts.GatewayClassName}})
	})
	var results summary
	opts.Hook = func(t *testing.T, test suite.ConformanceTest, s *suite.ConformanceTestSuite) {
		results.record(t, test, s)
	}
	if *summaryPath != "" {
		// Registered before the suite's cleanups, so it runs after them.
		t.Cleanup(func() {
			if err := results.write(*summaryPath, opts, time.Since(start)); err != nil {
				t.Errorf("write the summary: %v", err)
			}
		})
	}
	if opts.CleanupBaseResources {
		// Registered before the suite's cleanups, so it runs after them: the namespaces
		// they delete must go, which takes kube-controller-manager's namespace controller
		// and the pod runner stopping and deleting their pods.
		t.Cleanup(func() {
			namespacesGone(t, cluster, suite.InfrastructureNamespace, suite.AppBackendNamespace, suite.WebBackendNamespace)
		})
	}
	t.Logf("system up in %v", time.Since(start).Round(time.Millisecond))
	conformance.RunConformanceWithOptions(t, opts)
	t.Logf("conformance run took %v", time.Since(start).Round(time.Second))
}

// namespacesGone fails t unless every namespace of names is deleted within two minutes.
func namespacesGone(t *testing.T, cluster *testenv.Cluster, names ...string) {
	t.Helper()
	testenv.WaitUntil(t, 2*time.Minute, fmt.Sprintf("namespaces %v are deleted", names), func() bool {
		for _, name := range names {
			err := cluster.Get(context.Background(), client.ObjectKey{Name: name}, &corev1.Namespace{})
			if !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
}

// implementation fills in what the report says of Switchboard, keeping what flags set.
func implementation(set confv1.Implementation) confv1.Implementation {
	contact := set.Contact
	if len(contact) == 0 {
		contact = []string{"https://github.com/switchboard-llm/switchboard/issues"}
	}
	return confv1.Implementation{
		Organization: cmp.Or(set.Organization, "switchboard-llm"),
		Project:      cmp.Or(set.Project, "switchboard"),
		URL:          cmp.Or(set.URL, "https://github.com/switchboard-llm/switchboard"),
		Version:      cmp.Or(set.Version, "dev"),
		Contact:      contact,
	}
}

// manifests returns the suite's base manifests without the coredns Deployment, whose
// image the local pod runner does not run: only UDPRoute tests, which are not part of
// GATEWAY-HTTP, use it, and the suite waits for every pod of the base namespaces to be
// Ready before it starts.
func manifests(t *testing.T) fs.FS {
	t.Helper()
	data, err := fs.ReadFile(&conformance.Manifests, "base/manifests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("base manifests: %v", err)
		}
		var obj metav1.PartialObjectMetadata
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("base manifests: %v", err)
		}
		if obj.Kind == "Deployment" && obj.APIVersion == appsv1.SchemeGroupVersion.String() && obj.Name == "coredns" {
			continue
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		out.WriteString("---\n")
		out.Write(doc)
	}
	return fstest.MapFS{baseManifests: {Data: out.Bytes()}}
}
