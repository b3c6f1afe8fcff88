package metadata_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
	"github.com/switchboard-llm/switchboard/internal/metadata"
	"github.com/switchboard-llm/switchboard/internal/scheme"
)

// TestMetadataServiceOverRealCluster runs the metadata cache context on a manager against
// a real kube-apiserver and etcd (envtest, binaries from bin/k8s via KUBEBUILDER_ASSETS),
// serves the API through NewServer on loopback and reads it over HTTP while an in-process
// engine simulator behind a Pod is scraped.
func TestMetadataServiceOverRealCluster(t *testing.T) {
	k, cfg := startCluster(t)
	const ns = "metadata-it"
	create(t, k, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})

	engine := enginesim.DefaultConfig()
	engine.TimeScale = 0.01
	engineAddr := startEngine(t, "127.0.0.2", engine)
	pod := runningPod(t, k, ns, "engine-0", engine.Model, engineAddr)

	adapter := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sql-lora"},
		Spec: v1alpha1.ModelAdapterSpec{
			BaseModel:   engine.Model,
			ArtifactURL: "file:///adapters/sql-lora",
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "engine"}},
		},
	}
	create(t, k, adapter)
	adapter.Status.Instances = []string{pod.Name}
	if err := k.Status().Update(context.Background(), adapter); err != nil {
		t.Fatalf("update ModelAdapter status: %v", err)
	}

	apiURL := runMetadataService(t, cfg)
	api := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	t.Cleanup(api.CloseIdleConnections)

	t.Run("models", func(t *testing.T) {
		want := fmt.Sprintf(`{"object":"list","data":[
			{"id":%q,"object":"model","owned_by":"switchboard","parent":null},
			{"id":"sql-lora","object":"model","owned_by":"switchboard","parent":%q}]}`, engine.Model, engine.Model)
		var last string
		waitUntil(t, "the base model and the adapter are listed", func() bool {
			var models map[string]any
			last = getJSON(t, api, apiURL+"/v1/models", &models)
			for _, m := range models["data"].([]any) {
				delete(m.(map[string]any), "created")
			}
			return jsonEqual(t, models, want)
		}, func() string { return last })
	})

	t.Run("endpoints with scraped metrics", func(t *testing.T) {
		// One completion, so that the engine's counters move and the scrapes show it.
		resp, err := api.Post("http://"+engineAddr+"/v1/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"hello","max_tokens":4}`, engine.Model)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("completion status = %d", resp.StatusCode)
		}

		type endpointList struct {
			Data []struct {
				Namespace, Name, Address, Model, Engine string
				Port                                    int
				Ready, Routable                         bool
				Adapters                                []string
				Metrics                                 *struct {
					BlockSize             int     `json:"block_size"`
					NumGPUBlocks          int     `json:"num_gpu_blocks"`
					GenerationTokensTotal float64 `json:"generation_tokens_total"`
					Stale                 bool
					LoRA                  struct {
						MaxLoRA int `json:"max_lora"`
					}
				}
			}
		}
		var last string
		waitUntil(t, "the endpoint shows its scraped metrics", func() bool {
			var got endpointList
			last = getJSON(t, api, apiURL+"/v1/endpoints?model=sql-lora", &got)
			if len(got.Data) != 1 {
				return false
			}
			e := got.Data[0]
			if e.Namespace != ns || e.Name != pod.Name || net.JoinHostPort(e.Address, strconv.Itoa(e.Port)) != engineAddr ||
				e.Model != engine.Model || e.Engine != "vllm" || !e.Ready || !e.Routable ||
				!slices.Equal(e.Adapters, []string{"sql-lora"}) {
				t.Fatalf("endpoint = %+v", e)
			}
			m := e.Metrics
			return m != nil && !m.Stale && m.BlockSize == engine.BlockSize && m.NumGPUBlocks == engine.KVBlocks &&
				m.LoRA.MaxLoRA == engine.MaxLoRAs && m.GenerationTokensTotal > 0
		}, func() string { return last })
	})
}

// startCluster starts a control plane with Switchboard's CRDs that stops when the test
// ends, and returns a client and its config.
func startCluster(t *testing.T) (client.Client, *envtest.Environment) {
	t.Helper()
	env := &envtest.Environment{
		CRDDirectoryPaths: []string{
			filepath.Join("..", "..", "config", "crd", "bases"),
			filepath.Join("..", "..", "config", "crd", "gateway-api"),
		},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest (run through make test, which sets KUBEBUILDER_ASSETS): %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	k, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return k, env
}

// runMetadataService runs what cmd/metadata-service wires — a manager with the metadata
// cache context and the API server — until the test ends, waits for the cache to sync
// and returns the API's base URL.
func runMetadataService(t *testing.T, env *envtest.Environment) string {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	view, err := cache.InitForMetadata(mgr, cache.Options{Scrape: cache.ScrapeOptions{Interval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(metadata.NewServer(metadata.NewHandler(view, metadata.Options{}), metadata.ServerOptions{Listener: ln})); err != nil {
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
	waitCtx, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	if err := view.WaitForSync(waitCtx); err != nil {
		t.Fatal(err)
	}
	return "http://" + ln.Addr().String()
}

// startEngine serves an in-process engine simulator on host (a 127.0.0.x address) until
// the test ends and returns its host:port.
func startEngine(t *testing.T, host string, cfg enginesim.Config) string {
	t.Helper()
	engine, err := enginesim.NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listen on %s (distinct loopback addresses need Linux): %v", host, err)
	}
	srv := httptest.NewUnstartedServer(engine.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String()
}

// runningPod creates an engine Pod for model at addr (host:port), labelled app=engine,
// and marks it Running and Ready with addr's host as its IP.
func runningPod(t *testing.T, k client.Client, ns, name, model, addr string) *corev1.Pod {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			v1alpha1.LabelModel: model, v1alpha1.LabelPort: port, "app": "engine",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine-sim"}}},
	}
	create(t, k, pod)
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      host,
		PodIPs:     []corev1.PodIP{{IP: host}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if err := k.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("update status of pod %s: %v", name, err)
	}
	return pod
}

// create creates obj.
func create(t *testing.T, k client.Client, obj client.Object) {
	t.Helper()
	if err := k.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// getJSON GETs url, expects 200 and decodes the body into v; it returns the body for
// failure messages.
func getJSON(t *testing.T, c *http.Client, url string, v any) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var body json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
	return string(body)
}

// jsonEqual reports whether v encodes the same JSON value as want.
func jsonEqual(t *testing.T, v any, want string) bool {
	t.Helper()
	got, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}

// waitUntil polls cond every 20ms and fails the test, showing last(), if it does not
// hold within 30s.
func waitUntil(t *testing.T, what string, cond func() bool, last func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s; last response: %s", what, last())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
