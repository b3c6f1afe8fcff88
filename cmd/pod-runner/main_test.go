package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// nodeReady returns the status of the node's Ready condition, "" without one.
func nodeReady(t *testing.T, c client.Client, name string) corev1.ConditionStatus {
	t.Helper()
	var node corev1.Node
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &node); err != nil {
		return ""
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return ""
}

// TestBinaryRegistersTheNodeAndStops builds the pod-runner binary, runs it against a
// real kube-apiserver (envtest, binaries from bin/k8s via KUBEBUILDER_ASSETS) with
// --kubeconfig, waits until /readyz passes and its Node is Ready, and stops it with
// a stop signal, after which the Node is NotReady.
func TestBinaryRegistersTheNodeAndStops(t *testing.T) {
	bin := testenv.Build(t, "pod-runner")
	cluster := testenv.Start(t)
	kubeconfig := cluster.Kubeconfig(t, "pod-runner")
	probes := testenv.FreeAddr(t, "127.0.0.1")

	runner := testenv.Run(t, bin, "--kubeconfig", kubeconfig, "--node-name", "binary-test",
		"--pod-ip-range", "127.0.43.0/28", "--bin-dir", t.TempDir(), "--state-dir", t.TempDir(),
		"--health-probe-bind-address", probes, "--heartbeat-interval", "1s", "--kubelet-bind-address", "127.0.0.1:0")

	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	status := func(path string) int {
		resp, err := client.Get("http://" + probes + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.WaitUntil(t, 30*time.Second, "pod-runner is ready", func() bool { return status("/readyz") == http.StatusOK })
	if got := status("/healthz"); got != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", got)
	}
	if got := nodeReady(t, cluster.Client, "binary-test"); got != corev1.ConditionTrue {
		t.Errorf("node Ready = %q, want True", got)
	}
	if port := kubeletPort(t, cluster.Client, "binary-test"); port == 0 {
		t.Error("the node advertises no kubelet port")
	} else if got := kubeletStatus(t, port); got != http.StatusNotFound {
		t.Errorf("the kubelet endpoint answers the logs of an unknown pod with %d, want 404", got)
	}

	if err := runner.Stop(t, 30*time.Second); err != nil {
		t.Errorf("pod-runner exited with %v after a stop signal, want success", err)
	}
	if got := nodeReady(t, cluster.Client, "binary-test"); got != corev1.ConditionFalse {
		t.Errorf("node Ready = %q after SIGTERM, want False", got)
	}
}

// kubeletPort returns the kubelet port the node advertises, 0 if none.
func kubeletPort(t *testing.T, c client.Client, name string) int32 {
	t.Helper()
	var node corev1.Node
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &node); err != nil {
		t.Fatal(err)
	}
	return node.Status.DaemonEndpoints.KubeletEndpoint.Port
}

// kubeletStatus returns the status of a request for an unknown pod's logs to the
// kubelet endpoint on port, 0 if it does not answer.
func kubeletStatus(t *testing.T, port int32) int {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the endpoint's certificate is self-signed
	defer c.CloseIdleConnections()
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/containerLogs/default/nope/c", port))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestBinaryRejectsABadPodIPRange(t *testing.T) {
	bin := testenv.Build(t, "pod-runner")
	out, err := exec.Command(bin, "--pod-ip-range", "203.0.113.0/24", "--health-probe-bind-address", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a local address of this machine") {
		t.Errorf("pod-runner with a range of addresses that are not local = %v:\n%s\nwant a failure naming the problem", err, out)
	}
}
