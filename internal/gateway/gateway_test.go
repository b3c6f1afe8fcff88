package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/gateway/inbound"
	"github.com/switchboard-llm/switchboard/internal/routing/strategies"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

const ns = "gw-test"

// TestGateway runs the gateway against a real API server and engine simulators on
// 127.0.0.x, configured through a GatewayClass, Gateway, HTTPRoutes, a Service and a
// RoutingPolicy, and drives it with the OpenAI Go SDK and raw HTTP.
func TestGateway(t *testing.T) {
	c := testenv.Start(t)
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})

	app := map[string]string{"app": "llama"}
	e0 := testenv.EngineProcess(t, "127.0.0.2", "llama-3-8b")
	e1 := testenv.EngineProcess(t, "127.0.0.3", "llama-3-8b")
	slow := testenv.EngineProcess(t, "127.0.0.4", "slow-model", "--fault-slow-factor", "1000")
	drop := testenv.EngineProcess(t, "127.0.0.5", "drop-model", "--fault-drop-mid-stream")
	orphan := testenv.EngineProcess(t, "127.0.0.6", "orphan-model")
	c.EnginePod(t, ns, "llama-0", "llama-3-8b", e0, map[string]string{"app": "llama", "pin": "0"})
	c.EnginePod(t, ns, "llama-1", "llama-3-8b", e1, app)
	c.EnginePod(t, ns, "slow-0", "slow-model", slow, app)
	c.EnginePod(t, ns, "drop-0", "drop-model", drop, app)
	c.EnginePod(t, ns, "ghost-0", "ghost-model", testenv.FreeAddr(t, "127.0.0.7"), app) // nothing listens
	c.EnginePod(t, ns, "orphan-0", "orphan-model", orphan, nil)                         // no Service selects it

	listener := testenv.FreeAddr(t, "127.0.0.1")
	class, gw := gatewayObjects(t, ns, listener)
	svc := testenv.EngineService(ns, "llama", app)
	policy := &v1alpha1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rp"},
		Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest, AllowStrategyOverride: new(true)},
	}
	c.Create(t, class, gw, svc, policy,
		httpRoute("llama", nil, "rp"),
		httpRoute("broken", []gatewayv1.Hostname{"broken.example"}, "missing"))

	g, view := runGateway(t, c, gateway.Options{
		UpstreamTimeout: 2 * time.Second,
		Inbound:         inbound.Limits{MaxBodyBytes: 1 << 20},
		Limits:          strategies.Limits{MaxInFlight: 2, MaxQueued: 1},
	})
	registry := prometheus.NewRegistry()
	if err := g.Register(registry); err != nil {
		t.Fatal(err)
	}
	base := "http://" + listener
	testenv.WaitUntil(t, waitTimeout, "the gateway serves llama-3-8b", func() bool {
		status, _ := post(base, "", chatBody("llama-3-8b", false))
		return status == http.StatusOK
	})
	sdk := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()

	t.Run("chat", func(t *testing.T) {
		var resp *http.Response
		chat, err := sdk.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "llama-3-8b",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
			MaxTokens: openai.Int(8),
		}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		if len(chat.Choices) != 1 || chat.Choices[0].Message.Content == "" {
			t.Errorf("chat completion = %+v, want one choice with content", chat.Choices)
		}
		if ep := resp.Header.Get(gateway.HeaderEndpoint); ep != ns+"/llama-0" && ep != ns+"/llama-1" {
			t.Errorf("%s = %q, want a llama pod", gateway.HeaderEndpoint, ep)
		}
		if resp.Header.Get(gateway.HeaderRequestID) == "" {
			t.Errorf("no %s header", gateway.HeaderRequestID)
		}
	})

	t.Run("chat streaming", func(t *testing.T) {
		stream := sdk.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:     "llama-3-8b",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Count to five.")},
			MaxTokens: openai.Int(16),
		})
		var text strings.Builder
		chunks := 0
		for stream.Next() {
			chunks++
			for _, ch := range stream.Current().Choices {
				text.WriteString(ch.Delta.Content)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 2 || text.Len() == 0 {
			t.Errorf("stream gave %d chunks and %q, want several chunks of text", chunks, text.String())
		}
	})

	t.Run("client goes away mid-stream", func(t *testing.T) {
		streamCtx, cancel := context.WithCancel(ctx)
		stream := sdk.Chat.Completions.NewStreaming(streamCtx, openai.ChatCompletionNewParams{
			Model:     "llama-3-8b",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Write a long essay.")},
			MaxTokens: openai.Int(2000),
		})
		if !stream.Next() {
			t.Fatalf("no first chunk: %v", stream.Err())
		}
		cancel()
		_ = stream.Close()
		m, _ := view.Model("llama-3-8b")
		testenv.WaitUntil(t, waitTimeout, "the reservation is released and the engines stop generating", func() bool {
			if m.Load().InFlight() != 0 {
				return false
			}
			for _, name := range []string{"llama-0", "llama-1"} {
				p, _ := view.Pod(endpoint.Key{Namespace: ns, Name: name})
				if mt := p.FreshMetrics(time.Now(), time.Second); mt == nil || mt.Running != 0 {
					return false
				}
			}
			return true
		})
	})

	t.Run("completions", func(t *testing.T) {
		cmpl, err := sdk.Completions.New(ctx, openai.CompletionNewParams{
			Model:     "llama-3-8b",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens: openai.Int(8),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(cmpl.Choices) != 1 || cmpl.Choices[0].Text == "" {
			t.Errorf("completion = %+v, want one choice with text", cmpl.Choices)
		}
	})

	t.Run("load spreads over the backends", func(t *testing.T) {
		seen := map[string]int{}
		for range 20 {
			status, hdr := post(base, "", chatBody("llama-3-8b", false))
			if status != http.StatusOK {
				t.Fatalf("status %d", status)
			}
			seen[hdr.Get(gateway.HeaderEndpoint)]++
		}
		if len(seen) != 2 {
			t.Errorf("20 requests went to %v, want both llama pods", seen)
		}
	})

	t.Run("error codes", func(t *testing.T) {
		tests := []struct {
			name, host string
			body       []byte
			wantStatus int
			wantCode   string
		}{
			{"malformed body", "", []byte("{"), 400, "invalid_request"},
			{"missing model", "", []byte(`{"messages":[{"role":"user","content":"hi"}]}`), 400, "invalid_request"},
			{"unknown model", "", chatBody("no-such-model", false), 404, "model_not_found"},
			{"body too large", "", bytes.Repeat([]byte("x"), 2<<20), 413, "request_too_large"},
			{"missing policy", "broken.example", chatBody("llama-3-8b", false), 500, "invalid_route_filter"},
			{"unreachable engine", "", chatBody("ghost-model", false), 502, "upstream_unreachable"},
			{"model served by no pod behind the route", "", chatBody("orphan-model", false), 404, "model_not_found"},
			{"engine too slow", "", chatBody("slow-model", false), 504, "upstream_timeout"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				status, _, body := postRead(base, tt.host, tt.body)
				var e struct {
					Error struct{ Message, Type, Code string } `json:"error"`
				}
				if err := json.Unmarshal(body, &e); err != nil {
					t.Fatalf("status %d, body %q is not an OpenAI error: %v", status, body, err)
				}
				if status != tt.wantStatus || e.Error.Code != tt.wantCode || e.Error.Message == "" {
					t.Errorf("got %d %q (%s), want %d %q", status, e.Error.Code, e.Error.Message, tt.wantStatus, tt.wantCode)
				}
			})
		}
	})

	t.Run("an unknown requested strategy is the client's error", func(t *testing.T) {
		if status, _ := postWithHeader(base, gateway.HeaderStrategy, "fastest", chatBody("llama-3-8b", false)); status != http.StatusBadRequest {
			t.Errorf("x-routing-strategy: fastest answered %d, want 400", status)
		}
		if status, hdr := postWithHeader(base, gateway.HeaderStrategy, "random", chatBody("llama-3-8b", false)); status != http.StatusOK ||
			hdr.Get(gateway.HeaderEndpoint) == "" {
			t.Errorf("x-routing-strategy: random answered %d, want 200", status)
		}
	})

	t.Run("engine dies mid-stream", func(t *testing.T) {
		stream := sdk.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:     "drop-model",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell a long story.")},
			MaxTokens: openai.Int(64),
		})
		for stream.Next() {
		}
		if stream.Err() == nil {
			t.Error("a stream cut by the engine ended without an error")
		}
		testenv.WaitUntil(t, waitTimeout, "the reservation on drop-0 is released", func() bool {
			p, ok := view.Pod(endpoint.Key{Namespace: ns, Name: "drop-0"})
			return ok && p.Load().InFlight() == 0
		})
	})

	t.Run("queue full", func(t *testing.T) {
		// slow-0 takes two requests in flight and the model's queue one more; all three
		// end with 504 after the upstream timeout.
		done := make(chan int, 3)
		for range 3 {
			go func() {
				status, _ := post(base, "", chatBody("slow-model", false))
				done <- status
			}()
		}
		testenv.WaitUntil(t, waitTimeout, "slow-0 is full and one request waits", func() bool {
			m, ok := view.Model("slow-model")
			return ok && m.Load().InFlight() == 2 && m.Load().Waiting() == 1
		})
		status, hdr, body := postRead(base, "", chatBody("slow-model", false))
		if status != http.StatusTooManyRequests || !strings.Contains(string(body), "queue_full") || hdr.Get("Retry-After") != "1" {
			t.Errorf("request beyond the queue: %d Retry-After %q %s, want 429 queue_full, Retry-After 1", status, hdr.Get("Retry-After"), body)
		}
		for range 3 {
			<-done
		}
	})

	t.Run("a request queued past the policy's queue.maxWait gets 503 with Retry-After", func(t *testing.T) {
		patch := client.MergeFrom(policy.DeepCopy())
		policy.Spec.Queue = &v1alpha1.QueueConfig{MaxWait: &metav1.Duration{Duration: 100 * time.Millisecond}}
		if err := c.Patch(ctx, policy, patch); err != nil {
			t.Fatal(err)
		}
		testenv.WaitUntil(t, waitTimeout, "the gateway has the policy's queue settings", func() bool {
			rp, ok := view.Policies.Get(client.ObjectKeyFromObject(policy))
			return ok && rp.Spec.Queue != nil
		})
		// slow-0 takes two requests in flight; the third waits 100ms, not until one of
		// them ends with 504 after the 2s upstream timeout.
		done := make(chan int, 2)
		for range 2 {
			go func() {
				status, _ := post(base, "", chatBody("slow-model", false))
				done <- status
			}()
		}
		testenv.WaitUntil(t, waitTimeout, "slow-0 is full", func() bool {
			m, ok := view.Model("slow-model")
			return ok && m.Load().InFlight() == 2
		})
		status, hdr, body := postRead(base, "", chatBody("slow-model", false))
		if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "queue_timeout") || hdr.Get("Retry-After") != "1" {
			t.Errorf("request queued past maxWait: %d Retry-After %q %s, want 503 queue_timeout, Retry-After 1", status, hdr.Get("Retry-After"), body)
		}
		if m, _ := view.Model("slow-model"); m.Load().Waiting() != 0 {
			t.Errorf("%d requests still counted as waiting after the timeout", m.Load().Waiting())
		}
		for range 2 {
			<-done
		}
	})

	t.Run("ext_proc endpoint picker", func(t *testing.T) {
		dest, _, done := pickOverExtProc(t, g, gateway.PickScope{Namespace: ns}, chatBody("llama-3-8b", false))
		want := []string{e0, e1}
		if !slices.Contains(want, dest) {
			t.Fatalf("ext_proc destination = %q, want one of %v", dest, want)
		}
		m, _ := view.Model("llama-3-8b")
		if n := m.Load().InFlight(); n != 1 {
			t.Errorf("in flight while Envoy proxies = %d, want 1", n)
		}
		done()
		testenv.WaitUntil(t, waitTimeout, "the ext_proc reservation is released", func() bool { return m.Load().InFlight() == 0 })
	})

	t.Run("policy change applies live", func(t *testing.T) {
		patch := client.MergeFrom(policy.DeepCopy())
		policy.Spec.Strategy = v1alpha1.StrategySessionAffinity
		if err := c.Patch(ctx, policy, patch); err != nil {
			t.Fatal(err)
		}
		testenv.WaitUntil(t, waitTimeout, "one session sticks to one pod", func() bool {
			seen := map[string]bool{}
			for range 20 {
				_, hdr := postWithHeader(base, "x-session-id", "session-1", chatBody("llama-3-8b", false))
				seen[hdr.Get(gateway.HeaderEndpoint)] = true
			}
			return len(seen) == 1 && !seen[""]
		})
	})

	t.Run("HTTPRoute change applies live", func(t *testing.T) {
		broken := &gatewayv1.HTTPRoute{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "broken"}, broken); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(broken.DeepCopy())
		broken.Spec.Rules[0].Filters[0].ExtensionRef.Name = "rp"
		if err := c.Patch(ctx, broken, patch); err != nil {
			t.Fatal(err)
		}
		testenv.WaitUntil(t, waitTimeout, "the repaired route serves", func() bool {
			status, _ := post(base, "broken.example", chatBody("llama-3-8b", false))
			return status == http.StatusOK
		})
	})

	t.Run("pod deleted under load", func(t *testing.T) {
		var failures atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		// Two clients plus the checks below stay within the in-flight cap and queue of the
		// one pod left, so any failure is the deletion's fault.
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if status, _ := post(base, "", chatBody("llama-3-8b", false)); status != http.StatusOK {
						failures.Add(1)
					}
				}
			})
		}
		if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llama-1"}}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitUntil(t, waitTimeout, "llama-1 leaves the cache", func() bool {
			_, ok := view.Pod(endpoint.Key{Namespace: ns, Name: "llama-1"})
			return !ok
		})
		// Keep the load on for a while after the removal.
		for range 20 {
			if _, hdr := post(base, "", chatBody("llama-3-8b", false)); hdr.Get(gateway.HeaderEndpoint) != ns+"/llama-0" {
				t.Errorf("a request after the deletion went to %q", hdr.Get(gateway.HeaderEndpoint))
			}
		}
		close(stop)
		wg.Wait()
		if n := failures.Load(); n != 0 {
			t.Errorf("%d requests failed while a pod was deleted", n)
		}
	})

	t.Run("Service change applies live", func(t *testing.T) {
		patch := client.MergeFrom(svc.DeepCopy())
		svc.Spec.Selector = map[string]string{"app": "nothing"}
		if err := c.Patch(ctx, svc, patch); err != nil {
			t.Fatal(err)
		}
		testenv.WaitUntil(t, waitTimeout, "the route has no backend pods left", func() bool {
			status, _ := post(base, "", chatBody("llama-3-8b", false))
			return status == http.StatusNotFound // the model is not served behind the route
		})
	})

	t.Run("metrics", func(t *testing.T) {
		families, err := registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]float64{}
		for _, f := range families {
			if f.GetName() != "switchboard_gateway_requests_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				counts[labels["model"]+" "+labels["code"]] += m.GetCounter().GetValue()
				if labels["endpoint"] == ns+"/llama-1" {
					t.Errorf("a series of the deleted pod llama-1 is still exported: %v", labels)
				}
			}
		}
		if counts["llama-3-8b 200"] < 20 || counts["slow-model 504"] < 1 || counts[" 404"] < 1 || counts["slow-model 429"] < 1 {
			t.Errorf("requests_total by model and code = %v", counts)
		}
	})

	for _, key := range []string{"llama-0", "llama-1", "slow-0", "drop-0", "ghost-0", "orphan-0"} {
		if p, ok := view.Pod(endpoint.Key{Namespace: ns, Name: key}); ok {
			testenv.WaitUntil(t, waitTimeout, "no request stays reserved on "+key, func() bool { return p.Load().InFlight() == 0 })
		}
	}
}

// httpRoute returns an HTTPRoute attached to Gateway "gw" that sends everything on
// hostnames to Service "llama" under RoutingPolicy policy.
func httpRoute(name string, hostnames []gatewayv1.Hostname, policy string) *gatewayv1.HTTPRoute {
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Hostnames:       hostnames,
			Rules: []gatewayv1.HTTPRouteRule{{
				Filters: []gatewayv1.HTTPRouteFilter{{
					Type: gatewayv1.HTTPRouteFilterExtensionRef,
					ExtensionRef: &gatewayv1.LocalObjectReference{
						Group: gatewayv1.Group(v1alpha1.GroupVersion.Group), Kind: "RoutingPolicy", Name: gatewayv1.ObjectName(policy),
					},
				}},
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{Name: "llama", Port: new(gatewayv1.PortNumber(8000))},
				}}},
			}},
		},
	}
}

// postWithHeader is post with one extra request header.
func postWithHeader(base, key, value string, body []byte) (int, http.Header) {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set(key, value)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

// chatBody returns a small chat completion request for model.
func chatBody(model string, stream bool) []byte { return chatBodyOf(model, stream, 4, "hi") }

// chatBodyOf returns a chat completion request for model of maxTokens output tokens
// whose one user message is content, streamed if stream.
func chatBodyOf(model string, stream bool, maxTokens int, content string) []byte {
	b, _ := json.Marshal(map[string]any{
		"model":      model,
		"stream":     stream,
		"max_tokens": maxTokens,
		"messages":   []map[string]string{{"role": "user", "content": content}},
	})
	return b
}

// post sends body to the gateway's chat completions path with Host host (the
// listener's address if empty) and returns the status and headers.
func post(base, host string, body []byte) (int, http.Header) {
	status, hdr, _ := postRead(base, host, body)
	return status, hdr
}

// postRead is post that also returns the response body.
func postRead(base, host string, body []byte) (int, http.Header, []byte) {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil
	}
	req.Header.Set("Content-Type", "application/json")
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}
