package metadata_test

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/metadata"
)

// now is the handler's clock in the unit tests; created is its Unix time.
var now = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

const created = 1735689600

// fakeView is a metadata view over a plain cache with a fixed staleness threshold,
// synced unless notSynced.
type fakeView struct {
	*cache.Cache
	staleAfter time.Duration
	notSynced  bool
}

func (v fakeView) StaleAfter() time.Duration { return v.staleAfter }
func (v fakeView) Synced() bool              { return !v.notSynced }

var _ metadata.Reader = fakeView{}

// podBuilder builds an engine endpoint: makePod("p").Serving("llama").At("10.0.0.1").Ready().
type podBuilder struct{ ep endpoint.Endpoint }

// makePod starts a vLLM pod named name in namespace ns on port 8000, without model,
// address or readiness.
func makePod(name string) *podBuilder {
	return &podBuilder{ep: endpoint.Endpoint{
		Key: endpoint.Key{Namespace: "ns", Name: name}, Port: 8000, Engine: endpoint.EngineVLLM,
	}}
}

func (b *podBuilder) Namespace(ns string) *podBuilder      { b.ep.Key.Namespace = ns; return b }
func (b *podBuilder) Serving(model string) *podBuilder     { b.ep.BaseModel = model; return b }
func (b *podBuilder) At(address string) *podBuilder        { b.ep.Address = address; return b }
func (b *podBuilder) Engine(e endpoint.Engine) *podBuilder { b.ep.Engine = e; return b }
func (b *podBuilder) Ready() *podBuilder                   { b.ep.Ready = true; return b }
func (b *podBuilder) Terminating() *podBuilder             { b.ep.Terminating = true; return b }

// fleet builds the cache every handler test reads:
//
//   - ns/a: llama at 10.0.0.1, ready, adapter sql-lora loaded, fresh metrics.
//   - ns/b: llama at 10.0.0.2, ready, never scraped, two requests in flight.
//   - ns/c: llama without an address (not routable), adapter sql-lora loaded.
//   - ns/d: qwen at 10.0.0.4, terminating; qwen has no routable endpoint.
//   - other/m: mistral on SGLang at 10.1.0.1, ready, stale metrics with a NaN gauge.
func fleet(t *testing.T) fakeView {
	t.Helper()
	c := cache.New()
	for _, b := range []*podBuilder{
		makePod("a").Serving("llama").At("10.0.0.1").Ready(),
		makePod("b").Serving("llama").At("10.0.0.2").Ready(),
		makePod("c").Serving("llama").Ready(),
		makePod("d").Serving("qwen").At("10.0.0.4").Ready().Terminating(),
		makePod("m").Namespace("other").Serving("mistral").At("10.1.0.1").Engine(endpoint.EngineSGLang).Ready(),
	} {
		c.UpsertPod(b.ep)
	}
	c.SetAdapterInstances(endpoint.Key{Namespace: "ns", Name: "sql-lora"}, "llama", []string{"a", "c"})

	pod := func(ns, name string) *cache.Pod {
		p, ok := c.Pod(endpoint.Key{Namespace: ns, Name: name})
		if !ok {
			t.Fatalf("no pod %s/%s", ns, name)
		}
		return p
	}
	c.SetMetrics(pod("ns", "a"), endpoint.Metrics{
		Running: 3, Waiting: 1, KVCacheUsage: 0.25, PrefixCacheHitRate: 0.5,
		TTFT: endpoint.Histogram{Count: 4, Sum: 0.2}, TPOT: endpoint.Histogram{Count: 10, Sum: 0.15},
		E2E: endpoint.Histogram{Count: 4, Sum: 2}, PromptTokens: 400, GenerationTokens: 100,
		BlockSize: 16, NumGPUBlocks: 2048,
		LoRA:      endpoint.LoRAState{Running: []string{"sql-lora"}, MaxLoRA: 4},
		ScrapedAt: now.Add(-2 * time.Second),
	})
	c.SetMetrics(pod("other", "m"), endpoint.Metrics{
		Running: 1, KVCacheUsage: math.NaN(), PromptTokens: math.Inf(1),
		ScrapedAt: now.Add(-time.Minute),
	})
	llama, _ := c.Model("llama")
	for range 2 {
		cache.Tracker{}.Reserve(llama, pod("ns", "b"), 0)
	}
	return fakeView{Cache: c, staleAfter: 10 * time.Second}
}

// serve sends one request to a handler over view and returns the response and body.
func serve(t *testing.T, view metadata.Reader, method, target string) (*http.Response, []byte) {
	t.Helper()
	h := metadata.NewHandler(view, metadata.Options{Now: func() time.Time { return now }})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec.Result(), rec.Body.Bytes()
}

// assertJSON fails unless got and want encode the same JSON value.
func assertJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("body:\n%s\nwant:\n%s", got, want)
	}
}

func TestHandler(t *testing.T) {
	view := fleet(t)
	tests := []struct {
		name       string
		method     string
		target     string
		wantStatus int
		wantBody   string
	}{
		{
			name: "models lists base models and adapters with a routable endpoint", method: "GET", target: "/v1/models",
			wantStatus: 200,
			wantBody: `{"object":"list","data":[
				{"id":"llama","object":"model","created":1735689600,"owned_by":"switchboard","parent":null},
				{"id":"mistral","object":"model","created":1735689600,"owned_by":"switchboard","parent":null},
				{"id":"sql-lora","object":"model","created":1735689600,"owned_by":"switchboard","parent":"llama"}]}`,
		},
		{
			name: "one adapter", method: "GET", target: "/v1/models/sql-lora",
			wantStatus: 200,
			wantBody:   `{"id":"sql-lora","object":"model","created":1735689600,"owned_by":"switchboard","parent":"llama"}`,
		},
		{
			name: "one base model", method: "GET", target: "/v1/models/llama",
			wantStatus: 200,
			wantBody:   `{"id":"llama","object":"model","created":1735689600,"owned_by":"switchboard","parent":null}`,
		},
		{
			name: "a model without routable endpoint is not found", method: "GET", target: "/v1/models/qwen",
			wantStatus: 404,
			wantBody: `{"error":{"type":"invalid_request_error","code":"model_not_found",
				"message":"The model ` + "`qwen`" + ` does not exist or has no ready endpoint."}}`,
		},
		{
			name: "endpoints of an adapter: routable or not, with fresh metrics or none", method: "GET", target: "/v1/endpoints?model=sql-lora",
			wantStatus: 200,
			wantBody: `{"object":"list","data":[
				{"namespace":"ns","name":"a","address":"10.0.0.1","port":8000,"model":"llama","engine":"vllm",
				 "ready":true,"terminating":false,"routable":true,"adapters":["sql-lora"],"in_flight":0,
				 "metrics":{"running":3,"waiting":1,"kv_cache_usage":0.25,"prefix_cache_hit_rate":0.5,
				   "ttft_mean_seconds":0.05,"tpot_mean_seconds":0.015,"e2e_mean_seconds":0.5,
				   "prompt_tokens_total":400,"generation_tokens_total":100,"block_size":16,"num_gpu_blocks":2048,
				   "lora":{"running":["sql-lora"],"waiting":[],"max_lora":4},
				   "scraped_at":"2024-12-31T23:59:58Z","age_seconds":2,"stale":false}},
				{"namespace":"ns","name":"c","address":"","port":8000,"model":"llama","engine":"vllm",
				 "ready":true,"terminating":false,"routable":false,"adapters":["sql-lora"],"in_flight":0,
				 "metrics":null}]}`,
		},
		{
			name: "stale metrics with values JSON cannot hold", method: "GET", target: "/v1/endpoints?model=mistral",
			wantStatus: 200,
			wantBody: `{"object":"list","data":[
				{"namespace":"other","name":"m","address":"10.1.0.1","port":8000,"model":"mistral","engine":"sglang",
				 "ready":true,"terminating":false,"routable":true,"adapters":[],"in_flight":0,
				 "metrics":{"running":1,"waiting":0,"kv_cache_usage":null,"prefix_cache_hit_rate":0,
				   "ttft_mean_seconds":0,"tpot_mean_seconds":0,"e2e_mean_seconds":0,
				   "prompt_tokens_total":null,"generation_tokens_total":0,"block_size":0,"num_gpu_blocks":0,
				   "lora":{"running":[],"waiting":[],"max_lora":0},
				   "scraped_at":"2024-12-31T23:59:00Z","age_seconds":60,"stale":true}}]}`,
		},
		{
			name: "requests in flight", method: "GET", target: "/v1/endpoints?model=llama&unknown=ignored",
			wantStatus: 200,
			wantBody: `{"object":"list","data":[
				{"namespace":"ns","name":"a","address":"10.0.0.1","port":8000,"model":"llama","engine":"vllm",
				 "ready":true,"terminating":false,"routable":true,"adapters":["sql-lora"],"in_flight":0,
				 "metrics":{"running":3,"waiting":1,"kv_cache_usage":0.25,"prefix_cache_hit_rate":0.5,
				   "ttft_mean_seconds":0.05,"tpot_mean_seconds":0.015,"e2e_mean_seconds":0.5,
				   "prompt_tokens_total":400,"generation_tokens_total":100,"block_size":16,"num_gpu_blocks":2048,
				   "lora":{"running":["sql-lora"],"waiting":[],"max_lora":4},
				   "scraped_at":"2024-12-31T23:59:58Z","age_seconds":2,"stale":false}},
				{"namespace":"ns","name":"b","address":"10.0.0.2","port":8000,"model":"llama","engine":"vllm",
				 "ready":true,"terminating":false,"routable":true,"adapters":[],"in_flight":2,"metrics":null},
				{"namespace":"ns","name":"c","address":"","port":8000,"model":"llama","engine":"vllm",
				 "ready":true,"terminating":false,"routable":false,"adapters":["sql-lora"],"in_flight":0,
				 "metrics":null}]}`,
		},
		{
			name: "endpoints of an unknown model", method: "GET", target: "/v1/endpoints?model=gpt-5",
			wantStatus: 200, wantBody: `{"object":"list","data":[]}`,
		},
		{
			name: "POST is not allowed", method: "POST", target: "/v1/models",
			wantStatus: 405,
			wantBody: `{"error":{"type":"invalid_request_error","code":"method_not_allowed",
				"message":"Method POST is not allowed on /v1/models; use GET."}}`,
		},
		{
			name: "DELETE is not allowed", method: "DELETE", target: "/v1/endpoints",
			wantStatus: 405,
			wantBody: `{"error":{"type":"invalid_request_error","code":"method_not_allowed",
				"message":"Method DELETE is not allowed on /v1/endpoints; use GET."}}`,
		},
		{
			name: "PUT on a model is not allowed", method: "PUT", target: "/v1/models/llama",
			wantStatus: 405,
			wantBody: `{"error":{"type":"invalid_request_error","code":"method_not_allowed",
				"message":"Method PUT is not allowed on /v1/models/llama; use GET."}}`,
		},
		{
			name: "unknown path", method: "GET", target: "/v1/chat/completions",
			wantStatus: 404,
			wantBody: `{"error":{"type":"invalid_request_error","code":"not_found",
				"message":"Unknown path /v1/chat/completions."}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := serve(t, view, tt.method, tt.target)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if tt.wantStatus == http.StatusMethodNotAllowed {
				if allow := resp.Header.Get("Allow"); allow != "GET, HEAD" {
					t.Errorf("Allow = %q, want GET, HEAD", allow)
				}
			}
			assertJSON(t, body, tt.wantBody)
		})
	}
}

func TestEndpointsFilter(t *testing.T) {
	view := fleet(t)
	tests := []struct {
		target string
		want   []string
	}{
		{"/v1/endpoints", []string{"ns/a", "ns/b", "ns/c", "ns/d", "other/m"}},
		{"/v1/endpoints?model=", []string{"ns/a", "ns/b", "ns/c", "ns/d", "other/m"}},
		{"/v1/endpoints?model=llama", []string{"ns/a", "ns/b", "ns/c"}},
		{"/v1/endpoints?model=sql-lora", []string{"ns/a", "ns/c"}},
		{"/v1/endpoints?model=qwen", []string{"ns/d"}},
		{"/v1/endpoints?model=nope", nil},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			resp, body := serve(t, view, "GET", tt.target)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200: %s", resp.StatusCode, body)
			}
			var got struct {
				Data []struct{ Namespace, Name string } `json:"data"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range got.Data {
				names = append(names, e.Namespace+"/"+e.Name)
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("endpoints = %v, want %v", names, tt.want)
			}
		})
	}
}

func TestEmptyCache(t *testing.T) {
	view := fakeView{Cache: cache.New(), staleAfter: time.Second}
	for _, target := range []string{"/v1/models", "/v1/endpoints"} {
		resp, body := serve(t, view, "GET", target)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status = %d, want 200", target, resp.StatusCode)
		}
		assertJSON(t, body, `{"object":"list","data":[]}`)
	}
}

func TestNotSynced(t *testing.T) {
	view := fleet(t)
	view.notSynced = true
	for _, target := range []string{"/v1/models", "/v1/models/llama", "/v1/endpoints"} {
		resp, body := serve(t, view, "GET", target)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s: status = %d, want 503", target, resp.StatusCode)
		}
		assertJSON(t, body, `{"error":{"type":"server_error","code":"not_ready",
			"message":"The metadata cache has not synced with the cluster yet; retry shortly."}}`)
	}
	if resp, _ := serve(t, view, "POST", "/v1/models"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST before sync: status = %d, want 405", resp.StatusCode)
	}
}

func TestHeadAnswersLikeGet(t *testing.T) {
	view := fleet(t)
	get, getBody := serve(t, view, "GET", "/v1/models")
	head, headBody := serve(t, view, "HEAD", "/v1/models")
	if head.StatusCode != http.StatusOK {
		t.Fatalf("HEAD status = %d, want 200", head.StatusCode)
	}
	if got, want := head.Header.Get("Content-Length"), get.Header.Get("Content-Length"); got != want || want == "" {
		t.Errorf("HEAD Content-Length = %q, GET's = %q", got, want)
	}
	// The recorder keeps what the handler wrote; a real server discards a HEAD body.
	if string(headBody) != string(getBody) {
		t.Errorf("HEAD body differs from GET's")
	}
}

func TestModelCreatedIsStable(t *testing.T) {
	view := fleet(t)
	clock := now
	h := metadata.NewHandler(view, metadata.Options{Now: func() time.Time { return clock }})
	clock = clock.Add(time.Hour)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/models/llama", nil))
	var m struct{ Created int64 }
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m.Created != created {
		t.Errorf("created = %d, want %d (when the handler was built)", m.Created, created)
	}
}
