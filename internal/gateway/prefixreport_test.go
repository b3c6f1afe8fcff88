package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/extproc"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// forgetfulEngine serves model like a vLLM engine whose prefix cache never holds
// anything: every answer reports usage with zero cached prompt tokens, in the body or,
// when the client asks for it, in a stream's final usage chunk.
func forgetfulEngine(t *testing.T, host, model string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "vllm:num_requests_running{model_name=%q} 0\nvllm:num_requests_waiting{model_name=%q} 0\n"+
			"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n", model, model)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, model)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream        bool `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		prompt := 0
		for _, m := range req.Messages {
			prompt += len(m.Content) / 4
		}
		usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}`, prompt, prompt+1)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":%s}`, model, usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n")
		if req.StreamOptions.IncludeUsage {
			fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":%s}\n\n", usage)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	ln := testenv.Listen(t, host)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestEngineUsageTrimsThePrefixIndex: the cached tokens an engine reports correct the
// prefix-cache index through the real gateway. A prompt the index expects the engine to
// hold comes back with no cached token, so the index forgets what was routed there
// before it; a streamed answer teaches the same through its final usage chunk, and a
// stream without usage teaches nothing.
func TestEngineUsageTrimsThePrefixIndex(t *testing.T) {
	const ns = "prefix-report-test"
	c := testenv.Start(t)
	spec := v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyPrefixCache}
	_, _, base, registry := policyGateway(t, c, ns, spec, []string{forgetfulEngine(t, "127.0.0.2", "llama-3-8b")})
	testenv.WaitUntil(t, waitTimeout, "the gateway routes llama-3-8b", func() bool {
		status, _ := post(base, "", chatBody("llama-3-8b", false))
		return status == http.StatusOK
	})
	trimmed := func() float64 {
		return metricValue(t, registry, "switchboard_gateway_prefix_index_trimmed_blocks_total")
	}
	send := func(prompt string, stream, usage bool) {
		t.Helper()
		body := map[string]any{"model": "llama-3-8b", "max_tokens": 1, "stream": stream,
			"messages": []map[string]string{{"role": "user", "content": prompt}}}
		if usage {
			body["stream_options"] = map[string]bool{"include_usage": true}
		}
		b, _ := json.Marshal(body)
		if status, _, resp := postRead(base, "", b); status != http.StatusOK {
			t.Fatalf("HTTP %d: %s", status, resp)
		}
	}
	prompt := func(word string) string { return strings.Repeat(word+" ", 640/len(word+" ")) } // 10 blocks

	send(prompt("older"), false, false)
	send(prompt("alpha"), false, false)
	if got := trimmed(); got != 0 {
		t.Fatalf("trimmed %g blocks before any prompt was expected held, want 0", got)
	}
	send(prompt("alpha"), false, false) // expected held, reported not cached
	// The gateway settles the receipt when the upstream body ends, which may be just
	// after the client has read the last byte.
	testenv.WaitUntil(t, waitTimeout, "a non-streamed answer reporting no cached token trims the older prompt", func() bool {
		return trimmed() > 0
	})
	afterBody := trimmed()
	send(prompt("bravo"), true, false)
	send(prompt("bravo"), true, false) // no usage in the stream: nothing learnt
	if got := trimmed(); got != afterBody {
		t.Errorf("a stream without usage trimmed %g blocks, want none", got-afterBody)
	}
	send(prompt("bravo"), true, true) // the final usage chunk reports no cached token
	testenv.WaitUntil(t, waitTimeout, "a stream whose usage chunk reports no cached token trims", func() bool {
		return trimmed() > afterBody
	})
}

// TestPickerPassesEngineUsageToThePrefixIndex: the ext_proc endpoint picker reads the
// answers the data plane passes it as the gateway's relay does, so the cached tokens an
// engine reports correct the prefix-cache index there too.
func TestPickerPassesEngineUsageToThePrefixIndex(t *testing.T) {
	const ns = "picker-report-test"
	c := testenv.Start(t)
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	c.EnginePod(t, ns, "llama-0", "llama-3-8b", forgetfulEngine(t, "127.0.0.2", "llama-3-8b"), nil)
	g, view := runGateway(t, c, gateway.Options{DefaultStrategy: v1alpha1.StrategyPrefixCache})
	registry := prometheus.NewRegistry()
	if err := g.Register(registry); err != nil {
		t.Fatal(err)
	}
	testenv.WaitUntil(t, waitTimeout, "the cache holds the pod", func() bool {
		m, ok := view.Model("llama-3-8b")
		return ok && m.PodSet().Len() == 1
	})
	picker := g.Picker(gateway.PickScope{Namespace: ns})
	headers := http.Header{":path": {"/v1/chat/completions"}, "Content-Type": {"application/json"}}
	trimmed := func() float64 {
		return metricValue(t, registry, "switchboard_gateway_prefix_index_trimmed_blocks_total")
	}
	// route picks an endpoint for a prompt of 10 blocks of word and passes it the answer's
	// chunks.
	route := func(word string, answer ...string) {
		t.Helper()
		body := chatBodyOf("llama-3-8b", false, 1, strings.Repeat(word+" ", 640/len(word+" ")))
		p, err := picker.Pick(context.Background(), extproc.Request{Headers: headers, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		for _, chunk := range answer {
			p.Reservation.Answer([]byte(chunk))
		}
		p.Reservation.Release()
	}
	const noneCached = `{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":160,"completion_tokens":1,` +
		`"total_tokens":161,"prompt_tokens_details":{"cached_tokens":0}}}`

	route("older")
	route("alpha")
	route("alpha") // expected held, but no answer passed: nothing learnt
	if got := trimmed(); got != 0 {
		t.Fatalf("trimmed %g blocks without an answer's usage, want 0", got)
	}
	half := len(noneCached) / 2
	route("alpha", noneCached[:half], noneCached[half:]) // expected held, reported not cached
	if got := trimmed(); got == 0 {
		t.Error("an answer reporting no cached token trimmed nothing")
	}
}
