package enginesim

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func complete(t *testing.T, te *testEngine, prompt string, maxTokens int64) *openai.Completion {
	t.Helper()
	resp, err := te.client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:     "llama-3-8b",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(maxTokens),
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestRepeatedPrefixHitsCacheAndIsFaster(t *testing.T) {
	cfg := fastConfig()
	cfg.PrefillPerToken = 5 * time.Millisecond // 1024 cold tokens take ~50ms at this scale
	te := startEngine(t, cfg)
	prompt := strings.Repeat("abcdefgh", 512) // 4096 bytes = 1024 tokens = 64 blocks

	cold := complete(t, te, prompt, 1)
	fams := te.metrics(t)
	if hits := value(t, fams, "vllm:prefix_cache_hits_total"); hits != 0 {
		t.Fatalf("cold prompt hit %v tokens", hits)
	}
	resp := complete(t, te, prompt+" and a new question", 1)
	// The TTFT the engine models for each request, from the cached tokens it reported: the
	// ordering is asserted on the model, not on wall-clock times of a shared machine.
	coldTTFT := te.engine.cfg.PrefillTime(int(cold.Usage.PromptTokens-cold.Usage.PromptTokensDetails.CachedTokens), 1)
	warmTTFT := te.engine.cfg.PrefillTime(int(resp.Usage.PromptTokens-resp.Usage.PromptTokensDetails.CachedTokens), 1)
	if warmTTFT >= coldTTFT {
		t.Fatalf("warm request's modelled TTFT %v is not less than cold %v", warmTTFT, coldTTFT)
	}
	fams = te.metrics(t)
	if hits := value(t, fams, "vllm:prefix_cache_hits_total"); hits != 1024 {
		t.Fatalf("prefix cache hits = %v tokens, want 1024", hits)
	}
	queries := value(t, fams, "vllm:prefix_cache_queries_total")
	if want := float64(1024 + resp.Usage.PromptTokens); queries != want {
		t.Fatalf("prefix cache queries = %v tokens, want %v", queries, want)
	}
	if n := value(t, fams, "vllm:time_to_first_token_seconds"); n != 2 {
		t.Fatalf("ttft observations = %v, want 2", n)
	}
}

func TestMaxNumSeqsQueuesFIFO(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxNumSeqs = 1
	cfg.InterTokenLatency = time.Second // 10ms per token at this scale
	te := startEngine(t, cfg)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := te.client.Completions.New(context.Background(), openai.CompletionNewParams{
				Model:     "llama-3-8b",
				Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("queued")},
				MaxTokens: openai.Int(5),
			}); err != nil {
				t.Error(err)
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		fams := te.metrics(t)
		if value(t, fams, "vllm:num_requests_running") == 1 && value(t, fams, "vllm:num_requests_waiting") == 2 {
			if usage := value(t, fams, "vllm:kv_cache_usage_perc"); usage <= 0 {
				t.Fatalf("kv usage %v while a request runs", usage)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never saw 1 running and 2 waiting")
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	fams := te.metrics(t)
	if value(t, fams, "vllm:num_requests_running") != 0 || value(t, fams, "vllm:num_requests_waiting") != 0 {
		t.Fatal("requests left in the scheduler")
	}
	if value(t, fams, "vllm:kv_cache_usage_perc") != 0 {
		t.Fatal("kv blocks still held after all requests finished")
	}
	if got := value(t, fams, "vllm:generation_tokens_total"); got != 15 {
		t.Fatalf("generation tokens = %v, want 15", got)
	}
}

func TestMetricsNamesAndTypes(t *testing.T) {
	te := startEngine(t, fastConfig())
	complete(t, te, "warm up the histograms", 3)
	fams := te.metrics(t)
	want := map[string]dto.MetricType{
		"vllm:num_requests_running":           dto.MetricType_GAUGE,
		"vllm:num_requests_waiting":           dto.MetricType_GAUGE,
		"vllm:kv_cache_usage_perc":            dto.MetricType_GAUGE,
		"vllm:prefix_cache_queries_total":     dto.MetricType_COUNTER,
		"vllm:prefix_cache_hits_total":        dto.MetricType_COUNTER,
		"vllm:prompt_tokens_total":            dto.MetricType_COUNTER,
		"vllm:generation_tokens_total":        dto.MetricType_COUNTER,
		"vllm:time_to_first_token_seconds":    dto.MetricType_HISTOGRAM,
		"vllm:time_per_output_token_seconds":  dto.MetricType_HISTOGRAM,
		"vllm:e2e_request_latency_seconds":    dto.MetricType_HISTOGRAM,
		"vllm:request_queue_time_seconds":     dto.MetricType_HISTOGRAM,
		"vllm:request_prefill_time_seconds":   dto.MetricType_HISTOGRAM,
		"vllm:request_decode_time_seconds":    dto.MetricType_HISTOGRAM,
		"vllm:request_inference_time_seconds": dto.MetricType_HISTOGRAM,
		"vllm:lora_requests_info":             dto.MetricType_GAUGE,
		"vllm:cache_config_info":              dto.MetricType_GAUGE,
	}
	for name, typ := range want {
		f, ok := fams[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s has type %v, want %v", name, f.GetType(), typ)
		}
	}
	if got := label(fams, "vllm:num_requests_running", "model_name"); got != "llama-3-8b" {
		t.Errorf("model_name label = %q", got)
	}
	if got := label(fams, "vllm:cache_config_info", "block_size"); got != "16" {
		t.Errorf("block_size label = %q", got)
	}
	if got := label(fams, "vllm:cache_config_info", "num_gpu_blocks"); got != "2048" {
		t.Errorf("num_gpu_blocks label = %q", got)
	}
	if value(t, fams, "vllm:time_per_output_token_seconds") != 2 || value(t, fams, "vllm:e2e_request_latency_seconds") != 1 {
		t.Error("histograms did not observe the request")
	}
	for _, name := range []string{"vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds"} {
		if got := label(fams, name, "model_name"); got != "llama-3-8b" {
			t.Errorf("%s model_name label = %q", name, got)
		}
	}
	checkPhaseInvariants(t, requestPhases(t, fams), 1)
}

// TestCachedMetricsPageFollowsEveryChange checks that the page scrapers get (the text
// format, uncompressed, cached until the series change) says what promhttp's would,
// before and after a request, and is rendered again only when something changed.
func TestCachedMetricsPageFollowsEveryChange(t *testing.T) {
	te := startEngine(t, fastConfig())
	same := func(when string) map[string]*dto.MetricFamily {
		t.Helper()
		cached, negotiated := te.metrics(t), te.metricsWith(t, false)
		if len(cached) != len(negotiated) {
			t.Fatalf("%s: the cached page has %d families, promhttp's %d", when, len(cached), len(negotiated))
		}
		for name, f := range negotiated {
			if !proto.Equal(f, cached[name]) {
				t.Errorf("%s: %s is %v on the cached page, %v on promhttp's", when, name, cached[name], f)
			}
		}
		return cached
	}
	same("idle")
	// The page goes out with its length, not in chunks: fewer writes for a fleet of
	// engines in one process.
	req, _ := http.NewRequest(http.MethodGet, te.srv.URL+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := te.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) > 0 {
		t.Errorf("the page came with Content-Length %d and Transfer-Encoding %q, %d bytes, %v; want its length",
			resp.ContentLength, resp.TransferEncoding, len(body), err)
	}
	page := te.engine.metrics.page.Load()
	te.metrics(t)
	if te.engine.metrics.page.Load() != page {
		t.Error("an unchanged engine rendered its page again")
	}
	complete(t, te, "count this prompt", 3)
	fams := same("after a request")
	if value(t, fams, "vllm:prompt_tokens_total") == 0 || value(t, fams, "vllm:generation_tokens_total") != 3 ||
		value(t, fams, "vllm:e2e_request_latency_seconds") != 1 {
		t.Errorf("the cached page missed the request: prompt %v, generation %v, e2e %v", value(t, fams, "vllm:prompt_tokens_total"),
			value(t, fams, "vllm:generation_tokens_total"), value(t, fams, "vllm:e2e_request_latency_seconds"))
	}
}

func TestQueueTimeIsTheWaitForASlot(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxNumSeqs = 1
	cfg.InterTokenLatency = time.Second // 10ms per token at this scale
	te := startEngine(t, cfg)
	// A sequence admitted directly holds the only slot without being measured, so the
	// histograms see just the completion queued behind it.
	holder, err := te.engine.admit(context.Background(), "holds the only slot", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := te.client.Completions.New(context.Background(), openai.CompletionNewParams{
			Model:     "llama-3-8b",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("queued behind the holder")},
			MaxTokens: openai.Int(3),
		})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for value(t, te.metrics(t), "vllm:num_requests_waiting") != 1 {
		if time.Now().After(deadline) {
			te.engine.finish(holder)
			t.Fatal("the completion never queued")
		}
		time.Sleep(time.Millisecond)
	}
	const hold = 30 * time.Millisecond
	time.Sleep(hold)
	te.engine.finish(holder)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	p := requestPhases(t, te.metrics(t))
	checkPhaseInvariants(t, p, 1)
	// Timers never fire early, so the modelled delays are lower bounds of the measured ones.
	if p.queue.sum < hold.Seconds() {
		t.Errorf("queue time %vs, want at least the %v the slot was held", p.queue.sum, hold)
	}
	if p.ttft.sum < p.queue.sum+p.prefill.sum {
		t.Errorf("ttft %vs does not include queue %vs and prefill %vs", p.ttft.sum, p.queue.sum, p.prefill.sum)
	}
	if want := 2 * te.engine.delay(cfg.InterTokenLatency); p.decode.sum < want.Seconds() {
		t.Errorf("decode time %vs, want at least two inter-token latencies (%v)", p.decode.sum, want)
	}
}

func TestPrefillTimeGrowsWithUncachedTokens(t *testing.T) {
	cfg := fastConfig()
	cfg.PrefillPerToken = 20 * time.Millisecond // 1024 cold tokens take ~205ms at this scale
	te := startEngine(t, cfg)
	prompt := strings.Repeat("abcdefgh", 512) // 1024 tokens = 64 blocks

	cold := complete(t, te, prompt, 1)
	p := requestPhases(t, te.metrics(t))
	coldPrefill := p.prefill.sum
	warm := complete(t, te, prompt+" and a new question", 1)
	p = requestPhases(t, te.metrics(t))
	warmPrefill := p.prefill.sum - coldPrefill
	checkPhaseInvariants(t, p, 2)

	coldUncached := int(cold.Usage.PromptTokens - cold.Usage.PromptTokensDetails.CachedTokens)
	warmUncached := int(warm.Usage.PromptTokens - warm.Usage.PromptTokensDetails.CachedTokens)
	if coldUncached != 1024 || warmUncached >= 16 {
		t.Fatalf("uncached tokens cold %d, warm %d: want 1024 and less than a block", coldUncached, warmUncached)
	}
	if want := te.engine.delay(te.engine.cfg.PrefillTime(coldUncached, 1)); coldPrefill < want.Seconds() {
		t.Errorf("cold prefill time %vs, want at least the modelled %v", coldPrefill, want)
	}
	if want := te.engine.delay(te.engine.cfg.PrefillTime(warmUncached, 1)); warmPrefill < want.Seconds() {
		t.Errorf("warm prefill time %vs, want at least the modelled %v", warmPrefill, want)
	}
	// Warm is modelled shorter than cold; the wall-clock times above are only checked
	// against their lower bounds, which a busy machine cannot break.
	if warm, cold := te.engine.cfg.PrefillTime(warmUncached, 1), te.engine.cfg.PrefillTime(coldUncached, 1); warm >= cold {
		t.Errorf("modelled warm prefill %v is not less than cold %v", warm, cold)
	}
	if p.decode.sum != 0 {
		t.Errorf("one-token completions decoded for %vs, want 0", p.decode.sum)
	}
}

func TestEncodeObservesPhasesWithoutDecode(t *testing.T) {
	te := startEngine(t, fastConfig())
	if status, body := te.post(t, "/v1/embeddings", map[string]any{"model": "llama-3-8b", "input": []string{"one", "two"}}); status != http.StatusOK {
		t.Fatalf("embeddings: %d %s", status, body)
	}
	p := requestPhases(t, te.metrics(t))
	checkPhaseInvariants(t, p, 2)
	if p.decode.sum != 0 || p.prefill.sum <= 0 {
		t.Errorf("prefill %vs, decode %vs: want all of inference in prefill", p.prefill.sum, p.decode.sum)
	}
	if p.ttft.count != 0 {
		t.Errorf("encode requests observed %d times to first token, want none", p.ttft.count)
	}
}

func TestLoRALifecycle(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxLoRAs = 1
	te := startEngine(t, cfg)
	status, body := te.post(t, "/v1/load_lora_adapter", loraRequest{"sql-lora", "/a/sql"})
	if status != http.StatusOK || !strings.Contains(body, "added successfully") {
		t.Fatalf("load: %d %s", status, body)
	}
	if status, body = te.post(t, "/v1/load_lora_adapter", loraRequest{"sql-lora", "/a/sql"}); status != http.StatusBadRequest || !strings.Contains(body, "already been loaded") {
		t.Fatalf("duplicate load: %d %s", status, body)
	}
	if status, body = te.post(t, "/v1/load_lora_adapter", loraRequest{"chat-lora", "/a/chat"}); status != http.StatusBadRequest || !strings.Contains(body, "max_loras") {
		t.Fatalf("load beyond max-loras: %d %s", status, body)
	}
	fams := te.metrics(t)
	if got := label(fams, "vllm:lora_requests_info", "max_lora"); got != "1" {
		t.Fatalf("max_lora label %q", got)
	}
	resp, err := te.client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:     "sql-lora",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("SELECT")},
		MaxTokens: openai.Int(2),
	})
	if err != nil || resp.Model != "sql-lora" {
		t.Fatalf("completion on adapter: %v %+v", err, resp)
	}
	if status, body = te.post(t, "/v1/unload_lora_adapter", map[string]string{"lora_name": "sql-lora"}); status != http.StatusOK || !strings.Contains(body, "removed successfully") {
		t.Fatalf("unload: %d %s", status, body)
	}
	if status, body = te.post(t, "/v1/unload_lora_adapter", map[string]string{"lora_name": "sql-lora"}); status != http.StatusNotFound {
		t.Fatalf("second unload: %d %s", status, body)
	}
	if status, _ = te.post(t, "/v1/completions", map[string]any{"model": "sql-lora", "prompt": "x"}); status != http.StatusNotFound {
		t.Fatalf("completion on unloaded adapter: %d", status)
	}
}

func TestLoRAInfoShowsRunningAdapter(t *testing.T) {
	for _, atStart := range []bool{false, true} {
		t.Run(map[bool]string{false: "loaded through the admin API", true: "loaded at start"}[atStart], func(t *testing.T) {
			cfg := fastConfig()
			cfg.InterTokenLatency = time.Second
			if atStart {
				cfg.LoRAModules = []LoRAModule{{Name: "sql-lora", Path: "/a/sql"}}
			}
			te := startEngine(t, cfg)
			if !atStart {
				if status, body := te.post(t, "/v1/load_lora_adapter", loraRequest{"sql-lora", "/a/sql"}); status != http.StatusOK {
					t.Fatalf("load: %d %s", status, body)
				}
			}
			done := make(chan error)
			go func() {
				_, err := te.client.Completions.New(context.Background(), openai.CompletionNewParams{
					Model:     "sql-lora",
					Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")},
					MaxTokens: openai.Int(20),
				})
				done <- err
			}()
			deadline := time.Now().Add(5 * time.Second)
			for label(te.metrics(t), "vllm:lora_requests_info", "running_lora_adapters") != "sql-lora" {
				if time.Now().After(deadline) {
					t.Fatal("running adapter never reported")
				}
				time.Sleep(time.Millisecond)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
