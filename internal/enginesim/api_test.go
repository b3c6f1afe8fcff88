package enginesim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

func TestChatCompletion(t *testing.T) {
	te := startEngine(t, fastConfig())
	resp, err := te.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "llama-3-8b",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there, engine!")},
		MaxTokens: openai.Int(5),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "llama-3-8b" || len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" {
		t.Fatalf("unexpected response %+v", resp)
	}
	if resp.Usage.CompletionTokens != 5 || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("usage %+v finish %q, want 5 tokens and length", resp.Usage, resp.Choices[0].FinishReason)
	}
	if resp.Usage.PromptTokens == 0 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+5 {
		t.Fatalf("inconsistent usage %+v", resp.Usage)
	}
}

func TestTextCompletion(t *testing.T) {
	te := startEngine(t, fastConfig())
	resp, err := te.client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:     "llama-3-8b",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("12345678")},
		MaxTokens: openai.Int(3),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "text_completion" || resp.Choices[0].Text == "" {
		t.Fatalf("unexpected response %+v", resp)
	}
	if resp.Usage.PromptTokens != 2 || resp.Usage.CompletionTokens != 3 {
		t.Fatalf("usage %+v, want 2 prompt (8 bytes / 4) and 3 completion tokens", resp.Usage)
	}
}

func TestChatStreamingWithUsage(t *testing.T) {
	te := startEngine(t, fastConfig())
	stream := te.client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "llama-3-8b",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream please")},
		MaxTokens:     openai.Int(6),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	defer stream.Close()
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	var last openai.ChatCompletionChunk
	for stream.Next() {
		last = stream.Current()
		acc.AddChunk(last)
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content == "" || acc.Choices[0].FinishReason != "length" {
		t.Fatalf("accumulated %+v", acc.Choices[0])
	}
	if len(last.Choices) != 0 || last.Usage.CompletionTokens != 6 {
		t.Fatalf("last chunk %+v, want usage-only chunk with 6 completion tokens", last)
	}
	// role chunk + 6 tokens + finish chunk + usage chunk
	if chunks != 9 {
		t.Fatalf("got %d chunks, want 9", chunks)
	}
}

func TestCompletionStreamingWithoutUsage(t *testing.T) {
	te := startEngine(t, fastConfig())
	stream := te.client.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:     "llama-3-8b",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon a time")},
		MaxTokens: openai.Int(4),
	})
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		c := stream.Current()
		if c.Usage.TotalTokens != 0 {
			t.Fatalf("usage sent without include_usage: %+v", c.Usage)
		}
		text.WriteString(c.Choices[0].Text)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.Len() == 0 {
		t.Fatal("no text streamed")
	}
}

func TestDeterministicWithSeed(t *testing.T) {
	texts := make([]string, 2)
	for i := range texts {
		te := startEngine(t, fastConfig())
		resp, err := te.client.Completions.New(context.Background(), openai.CompletionNewParams{
			Model:  "llama-3-8b",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("same seed")},
		})
		if err != nil {
			t.Fatal(err)
		}
		texts[i] = resp.Choices[0].Text
	}
	if texts[0] != texts[1] {
		t.Fatalf("same seed gave %q and %q", texts[0], texts[1])
	}
}

func TestErrors(t *testing.T) {
	te := startEngine(t, fastConfig())
	_, err := te.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "no-such-model",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Type != "NotFoundError" {
		t.Fatalf("unknown model: got %v, want 404 NotFoundError", err)
	}
	if !strings.Contains(apiErr.Message, "does not exist") {
		t.Fatalf("unexpected message %q", apiErr.Message)
	}
	status, body := te.post(t, "/v1/completions", `{"model":`)
	if status != http.StatusBadRequest || !strings.Contains(body, `"error"`) {
		t.Fatalf("malformed JSON: got %d %s", status, body)
	}
}

func TestAPIKey(t *testing.T) {
	cfg := fastConfig()
	cfg.APIKey = "secret"
	te := startEngine(t, cfg)
	if _, err := te.client.Models.List(context.Background()); err != nil {
		t.Fatalf("with key: %v", err)
	}
	resp, err := te.srv.Client().Get(te.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without key: got %d, want 401", resp.StatusCode)
	}
	resp, err = te.srv.Client().Get(te.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/health must not need the key, got %d", resp.StatusCode)
	}
}

func TestModelsListsAdaptersWithParent(t *testing.T) {
	te := startEngine(t, fastConfig())
	if status, body := te.post(t, "/v1/load_lora_adapter", loraRequest{"sql-lora", "/adapters/sql"}); status != http.StatusOK {
		t.Fatalf("load: %d %s", status, body)
	}
	page, err := te.client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.Data[0].ID != "llama-3-8b" || page.Data[1].ID != "sql-lora" {
		t.Fatalf("models %+v", page.Data)
	}
	var parent string
	if err := json.Unmarshal([]byte(page.Data[1].JSON.ExtraFields["parent"].Raw()), &parent); err != nil || parent != "llama-3-8b" {
		t.Fatalf("adapter parent %q (%v), want llama-3-8b", parent, err)
	}
}

// modelEndpoints are the endpoints added beside completions, each with a valid request for
// a model.
var modelEndpoints = []struct {
	path string
	body func(t *testing.T, model string) request
}{
	{"/v1/responses", jsonFields(map[string]any{"input": "hi", "max_output_tokens": 1})},
	{"/v1/embeddings", jsonFields(map[string]any{"input": "hi"})},
	{"/rerank", jsonFields(map[string]any{"query": "q", "documents": []string{"d"}})},
	{"/v1/rerank", jsonFields(map[string]any{"query": "q", "documents": []string{"d"}})},
	{"/v2/rerank", jsonFields(map[string]any{"query": "q", "documents": []string{"d"}})},
	{"/score", jsonFields(map[string]any{"text_1": "a", "text_2": "b"})},
	{"/v1/score", jsonFields(map[string]any{"text_1": "a", "text_2": "b"})},
	{"/tokenize", jsonFields(map[string]any{"prompt": "hi"})},
	{"/detokenize", jsonFields(map[string]any{"tokens": []int{1}})},
	{"/v1/audio/transcriptions", audioFields},
	{"/v1/audio/translations", audioFields},
}

func jsonFields(fields map[string]any) func(*testing.T, string) request {
	return func(t *testing.T, model string) request {
		body := maps.Clone(fields)
		body["model"] = model
		return toRequest(t, body)
	}
}

func audioFields(t *testing.T, model string) request {
	return formBody(t, map[string]string{"model": model}, []byte("RIFF"))
}

func TestEndpointsRequireKeyAndServedModel(t *testing.T) {
	open := startEngine(t, fastConfig())
	cfg := fastConfig()
	cfg.APIKey = "secret"
	keyed := startEngine(t, cfg)
	for _, ep := range modelEndpoints {
		t.Run(ep.path, func(t *testing.T) {
			if status, body := open.send(t, ep.path, ep.body(t, "llama-3-8b")); status != http.StatusOK {
				t.Fatalf("base model: %d %s", status, body)
			}
			status, body := open.send(t, ep.path, ep.body(t, "no-such-model"))
			got := decode[errorBody](t, body)
			if status != http.StatusNotFound || got.Error.Type != "NotFoundError" || got.Error.Message != "The model `no-such-model` does not exist." || got.Error.Code != 404 {
				t.Fatalf("unknown model: %d %s", status, body)
			}
			if status, body := keyed.send(t, ep.path, ep.body(t, "llama-3-8b")); status != http.StatusUnauthorized {
				t.Fatalf("without key: %d %s", status, body)
			}
		})
	}
}

func TestUsageReportsCachedTokens(t *testing.T) {
	te := startEngine(t, fastConfig())
	type usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	// usageOf reads the usage object of a body, or of the last chunk before [DONE] of a
	// stream, requiring the other chunks to carry none.
	usageOf := func(t *testing.T, body string, stream bool) usage {
		t.Helper()
		if !stream {
			return decode[struct{ Usage usage }](t, body).Usage
		}
		events := strings.Split(strings.TrimSpace(body), "\n\n")
		if len(events) < 2 || events[len(events)-1] != "data: [DONE]" {
			t.Fatalf("stream does not end with [DONE]: %q", body)
		}
		for _, ev := range events[:len(events)-2] {
			if strings.Contains(ev, `"usage"`) {
				t.Fatalf("usage before the final chunk: %s", ev)
			}
		}
		return decode[struct{ Usage usage }](t, strings.TrimPrefix(events[len(events)-2], "data: ")).Usage
	}
	long := strings.Repeat("a shared prefix ", 64) // 1024 bytes = 256 tokens = 16 blocks
	for _, c := range []struct {
		name   string
		path   string
		stream bool
	}{
		{"chat", "/v1/chat/completions", false},
		{"chat stream", "/v1/chat/completions", true},
		{"completion", "/v1/completions", false},
		{"completion stream", "/v1/completions", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := map[string]any{"model": "llama-3-8b", "max_tokens": 2, "stream": c.stream}
			if c.stream {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
			prompt := c.name + ": " + long
			if c.path == "/v1/chat/completions" {
				body["messages"] = []map[string]string{{"role": "user", "content": prompt}}
			} else {
				body["prompt"] = prompt
			}
			for i, wantCached := range []bool{false, true} {
				status, out := te.post(t, c.path, body)
				if status != http.StatusOK {
					t.Fatalf("request %d: %d %s", i, status, out)
				}
				u := usageOf(t, out, c.stream)
				if u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens == nil {
					t.Fatalf("request %d: no prompt_tokens_details.cached_tokens in %s", i, out)
				}
				cached := *u.PromptTokensDetails.CachedTokens
				if (cached > 0) != wantCached || cached > u.PromptTokens {
					t.Fatalf("request %d: cached_tokens %d of %d prompt tokens, want cached %v", i, cached, u.PromptTokens, wantCached)
				}
			}
		})
	}
}

// TestChatStreamBeginsWithTheFirstToken checks that a chat stream sends nothing, its role
// event included, before the prompt is prefilled, as vLLM streams: the first body bytes
// mark the start of the decode for whoever relays them.
func TestChatStreamBeginsWithTheFirstToken(t *testing.T) {
	cfg := fastConfig()
	cfg.TimeScale = 1
	cfg.PrefillOverhead = 150 * time.Millisecond
	cfg.InterTokenLatency = time.Millisecond
	te := startEngine(t, cfg)
	body := `{"model":"llama-3-8b","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	start := time.Now()
	resp, err := te.srv.Client().Post(te.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < cfg.PrefillOverhead {
		t.Errorf("the first event came %v after the request, before the %v prefill", elapsed, cfg.PrefillOverhead)
	}
	if !strings.Contains(first, `"role":"assistant"`) {
		t.Errorf("first event %q, want the assistant's role", first)
	}
}
