package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestBinaryServesAndStops builds the metadata-service binary, runs it against a real
// kube-apiserver (envtest, binaries from bin/k8s via KUBEBUILDER_ASSETS) with --kubeconfig,
// waits until /readyz passes, reads the API and stops it with SIGTERM.
func TestBinaryServesAndStops(t *testing.T) {
	bin := testenv.Build(t, "metadata-service")
	kubeconfigPath := testenv.Start(t).Kubeconfig(t, "metadata-service")

	api, metrics, probes := testenv.FreeAddr(t, "127.0.0.1"), testenv.FreeAddr(t, "127.0.0.1"), testenv.FreeAddr(t, "127.0.0.1")
	cmd := exec.Command(bin, "--kubeconfig", kubeconfigPath, "--bind-address", api,
		"--metrics-bind-address", metrics, "--health-probe-bind-address", probes,
		"--metrics-scrape-interval", "50ms", "--drain-timeout", "5s")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	status := func(method, url string) int {
		req, _ := http.NewRequest(method, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(30 * time.Second)
	for status("GET", "http://"+probes+"/readyz") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("metadata-service did not become ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := status("GET", "http://"+probes+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", got)
	}

	resp, err := client.Get("http://" + api + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Object string
		Data   []any
	}
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || models.Object != "list" || len(models.Data) != 0 {
		t.Errorf("GET /v1/models on an empty cluster = %d %+v (%v), want 200 and an empty list", resp.StatusCode, models, err)
	}
	if got := status("POST", "http://"+api+"/v1/models"); got != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/models = %d, want 405", got)
	}
	if got := status("GET", "http://"+metrics+"/metrics"); got != http.StatusOK {
		t.Errorf("/metrics = %d, want 200", got)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		reaped = true
		if err != nil {
			t.Errorf("metadata-service exited with %v after SIGTERM, want success", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("metadata-service did not stop within 30s of SIGTERM")
	}
}
