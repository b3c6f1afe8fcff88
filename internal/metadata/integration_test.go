package metadata_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
	"github.com/switchboard-llm/switchboard/internal/metadata"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestMetadataServiceOverRealCluster runs the metadata cache context on a manager against
// a real kube-apiserver and etcd (envtest, binaries from bin/k8s via KUBEBUILDER_ASSETS),
// serves the API through NewServer on loopback and reads it over HTTP while an in-process
// engine simulator behind a Pod is scraped.
func TestMetadataServiceOverRealCluster(t *testing.T) {
	c := testenv.Start(t)
	const ns = "metadata-it"
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})

	engine := enginesim.DefaultConfig()
	engine.TimeScale = 0.01
	// The engine serves the adapter the ModelAdapter places on it: the cache routes an
	// adapter to a pod only while the engine's own model listing agrees.
	engine.LoRAModules = []enginesim.LoRAModule{{Name: "sql-lora", Path: "/adapters/sql-lora"}}
	_, engineAddr := testenv.InProcessEngine(t, "127.0.0.2", engine)
	pod := c.EnginePod(t, ns, "engine-0", engine.Model, engineAddr, map[string]string{"app": "engine"})

	adapter := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sql-lora"},
		Spec: v1alpha1.ModelAdapterSpec{
			BaseModel:   engine.Model,
			ArtifactURL: "file:///adapters/sql-lora",
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "engine"}},
		},
	}
	c.Create(t, adapter)
	adapter.Status.Instances = []string{pod.Name}
	if err := c.Status().Update(context.Background(), adapter); err != nil {
		t.Fatalf("update ModelAdapter status: %v", err)
	}

	apiURL := runMetadataService(t, c)
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

// runMetadataService runs what cmd/metadata-service wires — a manager with the metadata
// cache context and the API server — on c until the test ends, waits for the cache to
// sync and returns the API's base URL.
func runMetadataService(t *testing.T, c *testenv.Cluster) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var view *cache.Metadata
	c.RunManager(t, func(mgr ctrl.Manager) error {
		var err error
		if view, err = cache.InitForMetadata(mgr, cache.Options{Scrape: cache.ScrapeOptions{Interval: 20 * time.Millisecond}}); err != nil {
			return err
		}
		return mgr.Add(metadata.NewServer(metadata.NewHandler(view, metadata.Options{}), metadata.ServerOptions{Listener: ln}))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := view.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return "http://" + ln.Addr().String()
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

// waitUntil polls cond and fails the test, showing last(), if it does not hold within
// 30s.
func waitUntil(t *testing.T, what string, cond func() bool, last func() string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("last response: %s", last())
		}
	}()
	testenv.WaitUntil(t, 30*time.Second, what, cond)
}
