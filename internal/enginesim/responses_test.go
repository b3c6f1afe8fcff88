package enginesim

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

func TestResponsesWithSDK(t *testing.T) {
	te := startEngine(t, fastConfig())
	resp, err := te.client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model:           "llama-3-8b",
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello, responses!")},
		Instructions:    openai.String("Be brief."),
		MaxOutputTokens: openai.Int(5),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "response" || resp.Status != responses.ResponseStatusCompleted || resp.Model != "llama-3-8b" || resp.OutputText() == "" {
		t.Fatalf("unexpected response %+v", resp)
	}
	msg := resp.Output[0].AsMessage()
	if len(resp.Output) != 1 || msg.Role != "assistant" || msg.Status != "completed" || msg.Content[0].Type != "output_text" {
		t.Fatalf("output %+v", resp.Output)
	}
	u := resp.Usage
	if u.OutputTokens != 5 || u.InputTokens == 0 || u.TotalTokens != u.InputTokens+5 || !u.InputTokensDetails.JSON.CachedTokens.Valid() {
		t.Fatalf("usage %+v", u)
	}
	if resp.Instructions.OfString != "Be brief." {
		t.Fatalf("instructions %+v", resp.Instructions)
	}
}

func TestResponsesStreamingWithSDK(t *testing.T) {
	te := startEngine(t, fastConfig())
	stream := te.client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "llama-3-8b",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("stream please", responses.EasyInputMessageRoleUser),
		}},
		MaxOutputTokens: openai.Int(4),
	})
	defer stream.Close()
	var types []string
	var deltas strings.Builder
	var done, final string
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != int64(len(types)) {
			t.Fatalf("event %d (%s) has sequence number %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.output_text.done":
			done = ev.AsResponseOutputTextDone().Text
		case "response.completed":
			completed := ev.AsResponseCompleted().Response
			final = completed.OutputText()
			if completed.Status != responses.ResponseStatusCompleted || completed.Usage.OutputTokens != 4 {
				t.Fatalf("completed response %+v", completed)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	if deltas.Len() == 0 || done != deltas.String() || final != deltas.String() {
		t.Fatalf("deltas %q, done %q, final %q: want the same non-empty text", deltas.String(), done, final)
	}
}

func TestResponsesInput(t *testing.T) {
	te := startEngine(t, fastConfig())
	usageOf := func(t *testing.T, body string) int {
		return decode[struct {
			Usage struct {
				InputTokens int `json:"input_tokens"`
			} `json:"usage"`
		}](t, body).Usage.InputTokens
	}
	// A message with text parts is flattened like a chat completion's.
	want := CountTokens(chatPrompt([]chatMessage{{Role: "system", Content: textContent("sys")}, {Role: "user", Content: textContent("ab")}}))
	runAPICases(t, te, []apiCase{
		{name: "parts", path: "/v1/responses", status: 200, body: map[string]any{
			"model": "llama-3-8b", "instructions": "sys", "max_output_tokens": 1,
			"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{
				map[string]string{"type": "input_text", "text": "a"}, map[string]string{"type": "input_text", "text": "b"},
			}}},
		}, check: func(t *testing.T, body string) {
			if got := usageOf(t, body); got != want {
				t.Fatalf("input tokens %d, want %d", got, want)
			}
		}},
		{name: "no type", path: "/v1/responses", status: 200, body: map[string]any{
			"model": "llama-3-8b", "max_output_tokens": 1, "input": []any{map[string]any{"role": "user", "content": "x"}},
		}},
		{name: "tool output", path: "/v1/responses", status: 400, contains: `input item type \"function_call_output\" is not supported`, body: map[string]any{
			"model": "llama-3-8b", "input": []any{map[string]any{"type": "function_call_output", "call_id": "c", "output": "x"}},
		}},
		{name: "empty list", path: "/v1/responses", status: 400, contains: "input must be", body: map[string]any{"model": "llama-3-8b", "input": []any{}}},
		{name: "missing input", path: "/v1/responses", status: 400, contains: "input must be", body: map[string]any{"model": "llama-3-8b"}},
		{name: "malformed", path: "/v1/responses", status: 400, contains: "malformed JSON", body: `{"input":`},
	})
}
