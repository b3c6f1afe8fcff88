package enginesim

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

type tokenizeAnswer struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int    `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

func TestTokenize(t *testing.T) {
	te := startEngine(t, fastConfig())
	messages := []chatMessage{{Role: "user", Content: textContent("hi")}}
	runAPICases(t, te, []apiCase{
		{name: "prompt", path: "/tokenize", body: map[string]any{"model": "llama-3-8b", "prompt": "hello world!", "return_token_strs": true}, status: 200,
			check: func(t *testing.T, body string) {
				got := decode[tokenizeAnswer](t, body)
				if got.Count != 3 || len(got.Tokens) != 3 || got.MaxModelLen != 2048*16 || !slices.Equal(got.TokenStrs, []string{"hell", "o wo", "rld!"}) {
					t.Fatalf("answer %+v", got)
				}
			}},
		{name: "short last token", path: "/tokenize", body: map[string]any{"model": "llama-3-8b", "prompt": "abcdef"}, status: 200,
			check: func(t *testing.T, body string) {
				if got := decode[tokenizeAnswer](t, body); !slices.Equal(got.Tokens, []int{0x61626364, 0x6566}) || got.TokenStrs != nil {
					t.Fatalf("answer %+v", got)
				}
			}},
		{name: "messages", path: "/tokenize", body: map[string]any{"model": "llama-3-8b", "messages": messages}, status: 200,
			check: func(t *testing.T, body string) {
				if got, want := decode[tokenizeAnswer](t, body).Count, CountTokens(chatPrompt(messages)); got != want {
					t.Fatalf("count %d, want %d as a chat completion counts", got, want)
				}
			}},
		{name: "no prompt", path: "/tokenize", body: map[string]any{"model": "llama-3-8b"}, status: 400, contains: "prompt must be"},
		{name: "detokenize", path: "/detokenize", body: map[string]any{"model": "llama-3-8b", "tokens": []int{0x61626364, 0x6566}}, status: 200, contains: `{"prompt":"abcdef"}`},
		{name: "negative id", path: "/detokenize", body: map[string]any{"model": "llama-3-8b", "tokens": []int{-1}}, status: 400, contains: "token id -1 is out of vocabulary"},
		{name: "id too large", path: "/detokenize", body: map[string]any{"model": "llama-3-8b", "tokens": []int{1 << 32}}, status: 400, contains: "out of vocabulary"},
	})
}

func TestTokenIDsRoundTripAndShareThePrefixCache(t *testing.T) {
	te := startEngine(t, fastConfig())
	text := strings.Repeat("0123456789abcdef", 8) + "tail" // 2 full blocks of 16 tokens
	_, body := te.post(t, "/tokenize", map[string]any{"model": "llama-3-8b", "prompt": text})
	ids := decode[tokenizeAnswer](t, body).Tokens
	if _, body = te.post(t, "/detokenize", map[string]any{"model": "llama-3-8b", "tokens": ids}); decode[map[string]string](t, body)["prompt"] != text {
		t.Fatalf("detokenize gave %s, want %q", body, text)
	}
	complete(t, te, text, 1)
	status, body := te.post(t, "/v1/completions", map[string]any{"model": "llama-3-8b", "prompt": ids, "max_tokens": 1})
	got := decode[struct{ Usage usage }](t, body).Usage
	if status != http.StatusOK || got.PromptTokens != len(ids) || got.PromptTokensDetails.CachedTokens != 32 {
		t.Fatalf("token-id prompt: %d %s, want %d prompt tokens with the text's 32 cached", status, body, len(ids))
	}
}
