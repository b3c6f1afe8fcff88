package enginesim

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

func TestFaultFailFraction(t *testing.T) {
	te := startEngine(t, fastConfig())
	if status, body := te.post(t, "/admin/faults", Faults{FailFraction: 1}); status != http.StatusOK {
		t.Fatalf("set faults: %d %s", status, body)
	}
	_, err := te.client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:  "llama-3-8b",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusInternalServerError {
		t.Fatalf("got %v, want 500", err)
	}
	if status, _ := te.post(t, "/admin/faults", Faults{FailFraction: 2}); status != http.StatusBadRequest {
		t.Fatalf("fail_fraction 2 accepted: %d", status)
	}
}

func TestFaultDropMidStream(t *testing.T) {
	cfg := fastConfig()
	cfg.Faults.DropMidStream = true
	te := startEngine(t, cfg)
	stream := te.client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:     "llama-3-8b",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("drop me")},
		MaxTokens: openai.Int(10),
	})
	defer stream.Close()
	chunks := 0
	for stream.Next() {
		chunks++
	}
	if stream.Err() == nil {
		t.Fatalf("stream ended cleanly after %d chunks, want a dropped connection", chunks)
	}
	if chunks == 0 || chunks >= 10 {
		t.Fatalf("got %d chunks before the drop, want some but not all", chunks)
	}
}

func TestFaultMetricsHang(t *testing.T) {
	cfg := fastConfig()
	cfg.Faults.MetricsHang = true
	te := startEngine(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, te.srv.URL+"/metrics", nil)
	resp, err := te.srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("/metrics answered while hanging")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a timeout", err)
	}
	te.engine.SetFaults(Faults{})
	te.metrics(t) // answers again
}

func TestFaultStartUnready(t *testing.T) {
	cfg := fastConfig()
	cfg.Faults.UnreadySeconds = 60
	te := startEngine(t, cfg)
	health := func() int {
		resp, err := te.srv.Client().Get(te.srv.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := health(); got != http.StatusServiceUnavailable {
		t.Fatalf("health %d while unready, want 503", got)
	}
	te.post(t, "/admin/faults", Faults{})
	if got := health(); got != http.StatusOK {
		t.Fatalf("health %d after clearing, want 200", got)
	}
}

func TestFaultSlowAnswers(t *testing.T) {
	te := startEngine(t, fastConfig())
	normal := te.engine.delay(time.Second)
	te.engine.SetFaults(Faults{SlowFactor: 20})
	if slow := te.engine.delay(time.Second); slow != 20*normal {
		t.Fatalf("slowed delay = %v, want 20 x %v", slow, normal)
	}
	// Sleeps never end early, so a slowed request takes at least its slowed prefill: a lower
	// bound that load on the machine cannot break.
	start := time.Now()
	resp := complete(t, te, "slow?", 3)
	minimum := te.engine.delay(te.engine.cfg.PrefillTime(int(resp.Usage.PromptTokens), 1))
	if took := time.Since(start); took < minimum {
		t.Fatalf("slow answer took %v, less than its slowed prefill %v", took, minimum)
	}
}

func TestFaultFailFractionCoversInferenceEndpoints(t *testing.T) {
	cfg := fastConfig()
	cfg.Faults.FailFraction = 1
	te := startEngine(t, cfg)
	for _, ep := range modelEndpoints {
		want := http.StatusInternalServerError
		if ep.path == "/tokenize" || ep.path == "/detokenize" {
			want = http.StatusOK
		}
		if status, body := te.send(t, ep.path, ep.body(t, "llama-3-8b")); status != want {
			t.Errorf("%s: %d %s, want %d", ep.path, status, body, want)
		}
	}
}
