package openai_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-llm/switchboard/internal/openai"
)

// parseCases are the table of TestParseRequest and the seed corpus of FuzzParseRequest.
var parseCases = []struct {
	name    string
	body    string
	want    openai.Request
	wantErr string // substring of the RequestError message; empty when parsing succeeds
}{
	{
		name: "chat with string contents",
		body: `{"model":"llama","stream":true,"max_tokens":64,"messages":[
			{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`,
		want: openai.Request{Model: "llama", Stream: true, MaxTokens: 64, Chat: true,
			Prompt: "system: Be brief.\nuser: Hi\n", Endpoint: openai.EndpointChatCompletions},
	},
	{
		name: "chat with content parts keeps only text parts",
		body: `{"model":"llama","messages":[{"role":"user","content":[
			{"type":"text","text":"look "},{"type":"image_url","image_url":{"url":"http://x/y.png"}},
			{"type":"text","text":"here"}]}]}`,
		want: openai.Request{Model: "llama", Chat: true, Prompt: "user: look here\n", Endpoint: openai.EndpointChatCompletions},
	},
	{
		name: "chat with null and empty contents",
		body: `{"model":"llama","messages":[{"role":"user","content":"q"},
			{"role":"assistant","content":null,"tool_calls":[]},{"role":"tool","content":[]}]}`,
		want: openai.Request{Model: "llama", Chat: true, Prompt: "user: q\nassistant: \ntool: \n", Endpoint: openai.EndpointChatCompletions},
	},
	{
		name: "max_completion_tokens wins over max_tokens",
		body: `{"model":"m","max_tokens":10,"max_completion_tokens":20,"messages":[{"role":"user","content":"x"}]}`,
		want: openai.Request{Model: "m", MaxTokens: 20, Chat: true, Prompt: "user: x\n", Endpoint: openai.EndpointChatCompletions},
	},
	{
		name: "completion with string prompt and null optional fields",
		body: `{"model":"m","prompt":"Once upon","stream":null,"max_tokens":null,"temperature":0.2}`,
		want: openai.Request{Model: "m", Prompt: "Once upon", Endpoint: openai.EndpointCompletions},
	},
	{
		name: "completion with string array prompt",
		body: `{"model":"m","prompt":["Once ","upon"],"stream":false,"max_tokens":5}`,
		want: openai.Request{Model: "m", Prompt: "Once upon", MaxTokens: 5, Endpoint: openai.EndpointCompletions},
	},
	{
		name: "completion with empty string prompt",
		body: `{"model":"m","prompt":""}`,
		want: openai.Request{Model: "m", Endpoint: openai.EndpointCompletions},
	},
	{name: "malformed JSON", body: `{"model":"m",`, wantErr: "not valid JSON"},
	{name: "trailing garbage", body: `{"model":"m","prompt":"p"} x`, wantErr: "not valid JSON"},
	{name: "empty body", body: ``, wantErr: "not valid JSON"},
	{name: "null body", body: ` null `, wantErr: "must be a JSON object"},
	{name: "array body", body: `[{"model":"m"}]`, wantErr: "must be a JSON object"},
	{name: "missing model", body: `{"prompt":"p"}`, wantErr: "model is required"},
	{name: "empty model", body: `{"model":"","prompt":"p"}`, wantErr: "model is required"},
	{name: "model of wrong type", body: `{"model":7,"prompt":"p"}`, wantErr: "model must be a string"},
	{name: "stream of wrong type", body: `{"model":"m","stream":"yes","prompt":"p"}`, wantErr: "stream must be a boolean"},
	{name: "fractional max_tokens", body: `{"model":"m","max_tokens":1.5,"prompt":"p"}`, wantErr: "max_tokens must be an integer"},
	{name: "negative max_tokens", body: `{"model":"m","max_tokens":-1,"prompt":"p"}`, wantErr: "max_tokens must not be negative"},
	{name: "negative max_completion_tokens", body: `{"model":"m","max_completion_tokens":-1,"prompt":"p"}`, wantErr: "max_completion_tokens must not be negative"},
	{name: "neither messages nor prompt", body: `{"model":"m"}`, wantErr: "messages (chat) or prompt (completions) is required"},
	{name: "null messages and prompt", body: `{"model":"m","messages":null,"prompt":null}`, wantErr: "is required"},
	{name: "both messages and prompt", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"prompt":"p"}`, wantErr: "mutually exclusive"},
	{name: "messages not an array", body: `{"model":"m","messages":"hi"}`, wantErr: "messages must be an array"},
	{name: "empty messages", body: `{"model":"m","messages":[]}`, wantErr: "messages must not be empty"},
	{name: "null message", body: `{"model":"m","messages":[null]}`, wantErr: "messages[0] must be an object"},
	{name: "message without role", body: `{"model":"m","messages":[{"content":"x"}]}`, wantErr: "messages[0].role is required"},
	{name: "content of wrong type", body: `{"model":"m","messages":[{"role":"user","content":5}]}`, wantErr: "messages[0].content must be"},
	{name: "content part of wrong type", body: `{"model":"m","messages":[{"role":"user","content":["x"]}]}`, wantErr: "messages[0].content must be"},
	{name: "null content part", body: `{"model":"m","messages":[{"role":"user","content":[null]}]}`, wantErr: "messages[0].content must be"},
	{name: "prompt of wrong type", body: `{"model":"m","prompt":{"text":"p"}}`, wantErr: "prompt must be a string or an array of strings"},
	{name: "empty prompt array", body: `{"model":"m","prompt":[]}`, wantErr: "prompt must not be an empty array"},
	{name: "token id prompt", body: `{"model":"m","prompt":[1,2,3]}`, wantErr: "token id arrays are not supported"},
	{name: "batch of token id prompts", body: `{"model":"m","prompt":[[1,2],[3]]}`, wantErr: "token id arrays are not supported"},
	{name: "prompt array with a non-string", body: `{"model":"m","prompt":["a",true]}`, wantErr: "prompt[1] must be a string"},
}

func TestParseRequest(t *testing.T) {
	for _, tt := range parseCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := openai.ParseRequest([]byte(tt.body))
			if tt.wantErr != "" {
				var reqErr *openai.RequestError
				if !errors.As(err, &reqErr) {
					t.Fatalf("ParseRequest() error = %v, want a *RequestError", err)
				}
				if !strings.Contains(reqErr.Message, tt.wantErr) {
					t.Errorf("error message = %q, want it to contain %q", reqErr.Message, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRequest() error = %v", err)
			}
			want := tt.want
			want.PromptLen = len(want.Prompt)
			if got != want {
				t.Errorf("ParseRequest() = %+v, want %+v", got, want)
			}
		})
	}
}

// TestParseRequestConversationPrefix checks the property prefix-cache routing relies on:
// the prompt of each turn of a conversation starts with the prompt of the turn before.
func TestParseRequestConversationPrefix(t *testing.T) {
	type msg struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	msgs := []msg{{Role: "system", Content: "You are terse."}}
	var previous string
	for turn := range 5 {
		msgs = append(msgs, msg{Role: "user", Content: []map[string]string{{"type": "text", "text": strings.Repeat("q", turn+1)}}})
		body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
		if err != nil {
			t.Fatal(err)
		}
		req, err := openai.ParseRequest(body)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if !strings.HasPrefix(req.Prompt, previous) || len(req.Prompt) <= len(previous) {
			t.Fatalf("turn %d prompt %q does not extend turn %d prompt %q", turn, req.Prompt, turn-1, previous)
		}
		previous = req.Prompt
		msgs = append(msgs, msg{Role: "assistant", Content: "a" + strings.Repeat("!", turn)})
	}
}

func TestPromptTokensRoundsTheBytesUp(t *testing.T) {
	tests := []struct {
		s    string
		want int64
	}{
		{"", 0}, {"a", 1}, {"abcd", 1}, {"abcde", 2}, {strings.Repeat("x", 4000), 1000}, {"héllo", 2},
	}
	for _, tt := range tests {
		r := openai.Request{Prompt: tt.s, PromptLen: len(tt.s)}
		if got := r.PromptTokens(); got != tt.want {
			t.Errorf("PromptTokens of %q = %d, want %d", tt.s, got, tt.want)
		}
	}
}

// FuzzParseRequest checks that ParseRequest never panics, fails only with a
// *RequestError carrying a message, and on success returns a request that survives a
// round trip: parsing the same body again, or a completion body built from the result,
// gives the same fields.
func FuzzParseRequest(f *testing.F) {
	for _, tt := range parseCases {
		f.Add([]byte(tt.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := openai.ParseRequest(body)
		if err != nil {
			var reqErr *openai.RequestError
			if !errors.As(err, &reqErr) || reqErr.Message == "" {
				t.Fatalf("error %v (%T) is not a *RequestError with a message", err, err)
			}
			return
		}
		if req.Model == "" || req.MaxTokens < 0 {
			t.Fatalf("ParseRequest accepted an empty model or negative length: %+v", req)
		}
		if !utf8.ValidString(req.Prompt) || !utf8.ValidString(req.Model) {
			t.Fatalf("ParseRequest returned invalid UTF-8: %+v", req)
		}
		if req.Chat && !strings.HasSuffix(req.Prompt, "\n") {
			t.Fatalf("chat prompt %q does not end with a message terminator", req.Prompt)
		}
		again, err := openai.ParseRequest(body)
		if err != nil || again != req {
			t.Fatalf("re-parsing gave %+v, %v; first parse gave %+v", again, err, req)
		}
		canonical, err := json.Marshal(map[string]any{"model": req.Model, "prompt": req.Prompt,
			"stream": req.Stream, "max_tokens": req.MaxTokens})
		if err != nil {
			t.Fatal(err)
		}
		roundTrip, err := openai.ParseRequest(canonical)
		want := req
		want.Chat, want.Endpoint = false, openai.EndpointCompletions
		if err != nil || roundTrip != want {
			t.Fatalf("round trip through %s gave %+v, %v; want %+v", canonical, roundTrip, err, want)
		}
	})
}
