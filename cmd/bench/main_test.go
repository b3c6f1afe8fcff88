package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/bench"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestScaleSectionAlone runs bin/bench with nothing but a small scale section, its
// scraped part included, the way `bin/bench -skip-routing` is used to measure it: the
// real bench, gateway, engine-sim and metadata service on a private control plane. The
// scale section must not lean on state the routing section sets up.
func TestScaleSectionAlone(t *testing.T) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	k8s := os.Getenv("KUBEBUILDER_ASSETS")
	if k8s == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set (make test sets it to bin/k8s)")
	}
	// A root of its own: the binaries just built, and the repository's scripts, CRDs and
	// control-plane binaries.
	bin := testenv.BuildCommands(t, "./cmd/bench", "./cmd/gateway", "./cmd/engine-sim", "./cmd/metadata-service")
	root := t.TempDir()
	for link, target := range map[string]string{
		filepath.Join(bin, "k8s"):     k8s,
		filepath.Join(root, "bin"):    bin,
		filepath.Join(root, "hack"):   filepath.Join(repo, "hack"),
		filepath.Join(root, "config"): filepath.Join(repo, "config"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	port := func() string {
		_, p, _ := net.SplitHostPort(testenv.FreeAddr(t, "127.0.0.1"))
		return p
	}
	out := filepath.Join(root, "out")
	// The ports are free when chosen, but the packages of `go test ./...` start their own
	// control planes meanwhile, and etcd's peer port (the next one) was never checked: a
	// control plane that fails to come up is tried again on other ports, twice at most.
	for attempt := 1; ; attempt++ {
		cmd := exec.Command(filepath.Join(bin, "bench"), "-root", root, "-out", out,
			"-state", filepath.Join(root, "state", strconv.Itoa(attempt)),
			"-skip-routing", "-proxy-rounds", "0", "-skip-go-bench",
			"-scale-endpoints", "20", "-scale-routes", "2", "-scale-scraped-engines", "4", "-scale-window", "2s",
			"-apiserver-port", port(), "-etcd-port", port())
		output, err := cmd.CombinedOutput()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(string(output), "cluster-up") {
			t.Fatalf("bench: %v\n%s", err, output)
		}
		clusterLog, _ := os.ReadFile(filepath.Join(root, "state", strconv.Itoa(attempt), "scale", "cluster.log"))
		t.Logf("attempt %d: the control plane did not come up, trying other ports:\n%s\ncluster.log:\n%s", attempt, output, clusterLog)
	}

	b, err := os.ReadFile(filepath.Join(out, "benchmarks.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res bench.Results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	s := res.Scale
	if s == nil || s.Endpoints != 20 || s.Routes != 2 || s.HeapInUseMB <= 0 {
		t.Fatalf("scale result = %+v, want 20 endpoints, 2 routes and a heap measured", s)
	}
	if s.Scraped == nil || s.Scraped.Engines != 4 {
		t.Fatalf("scraped part = %+v, want 4 engines", s.Scraped)
	}
	for name, v := range map[string]bench.ScraperView{"gateway": s.Scraped.Gateway, "metadata service": s.Scraped.Metadata} {
		if v.Samples < 4 || v.AgeP99MS <= 0 || v.Cores <= 0 {
			t.Errorf("%s's scraper = %+v, want ages of every engine sampled and its CPU measured", name, v)
		}
	}
}
