package openai_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/openai"
)

// benchText returns about n bytes of varied text: words, punctuation, newlines, quotes,
// backslashes, HTML-escaped characters and multi-byte UTF-8, so that its JSON encoding
// has escapes (\n, \", \\, \t, \u003c) as well as plain runs.
func benchText(n int, seed uint32) string {
	words := []string{"the", "model", "routes", "requests", "to", "a", "replica", "with",
		"warm", "prefix", "cache", "héllo", "naïve", "日本語", "テキスト", "😀", "say \"hi\"",
		"path\\to\\file", "a<b>&c", "tab\there", "end.\n", "ünïcödé", "Ωμέγα", "and", "of"}
	var sb strings.Builder
	sb.Grow(n + 32)
	x := seed
	for sb.Len() < n {
		x = x*1664525 + 1013904223 // LCG: deterministic and cheap
		sb.WriteString(words[(x>>16)%uint32(len(words))])
		if (x>>8)%7 == 0 {
			sb.WriteString(",\n")
		} else {
			sb.WriteByte(' ')
		}
	}
	return sb.String()
}

func mustMarshal(b *testing.B, v any) []byte {
	b.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

func BenchmarkParseRequest(b *testing.B) {
	type msg struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	short := []byte(`{"model":"llama","stream":true,"max_tokens":64,"messages":[` +
		`{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`)

	single := func(b *testing.B) []byte {
		return mustMarshal(b, map[string]any{"model": "llama", "stream": true, "max_tokens": 256,
			"temperature": 0.7, "messages": []msg{{Role: "user", Content: benchText(200<<10, 1)}}})
	}
	// The content before the role, as the OpenAI Go SDK writes a message.
	contentFirst := func(b *testing.B) []byte {
		type sdkMsg struct {
			Content string `json:"content"`
			Role    string `json:"role"`
		}
		return mustMarshal(b, map[string]any{"model": "llama", "max_tokens": 256,
			"messages": []sdkMsg{{Content: benchText(200<<10, 1), Role: "user"}}})
	}
	multi := func(b *testing.B) []byte {
		msgs := []msg{{Role: "system", Content: "You are a helpful assistant."}}
		for i := 1; i < 50; i++ {
			text := benchText(4<<10, uint32(i))
			switch {
			case i%10 == 5: // some turns use content parts
				msgs = append(msgs, msg{Role: "user", Content: []map[string]any{
					{"type": "text", "text": text[:len(text)/2]},
					{"type": "image_url", "image_url": map[string]string{"url": "https://example.com/x.png"}},
					{"type": "text", "text": text[len(text)/2:]}}})
			case i%2 == 1:
				msgs = append(msgs, msg{Role: "user", Content: text})
			default:
				msgs = append(msgs, msg{Role: "assistant", Content: text})
			}
		}
		return mustMarshal(b, map[string]any{"model": "llama", "stream": true,
			"max_completion_tokens": 512, "messages": msgs})
	}

	for _, bc := range []struct {
		name string
		body func(b *testing.B) []byte
	}{
		{"short", func(*testing.B) []byte { return short }},
		{"single_200KB", single},
		{"content_first_200KB", contentFirst},
		{"multi_turn_200KB", multi},
		// Plain English without characters JSON escapes, as many prompts are.
		{"plain_200KB", func(b *testing.B) []byte {
			return mustMarshal(b, map[string]any{"model": "llama", "max_tokens": 256, "messages": []msg{
				{Role: "user", Content: strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200<<10/45)}}})
		}},
		// Chinese text with a line break per sentence: multi-byte runes throughout.
		{"chinese_200KB", func(b *testing.B) []byte {
			return mustMarshal(b, map[string]any{"model": "llama", "max_tokens": 256, "messages": []msg{
				{Role: "user", Content: strings.Repeat("敏捷的棕色狐狸跳过了懒狗，然后回到森林里休息。\n", 200<<10/70)}}})
		}},
	} {
		// text builds the prompt's text, as for a prefix-cache policy; length only
		// measures it, as for the other strategies.
		for _, mode := range []struct {
			name string
			mode openai.PromptMode
		}{{"text", openai.PromptText}, {"length", openai.PromptLength}} {
			b.Run(bc.name+"/"+mode.name, func(b *testing.B) {
				benchParse(b, openai.EndpointChatCompletions, bc.body(b), mode.mode)
			})
		}
	}
}

// BenchmarkParseRequestFor measures the endpoints other than chat and completions,
// which encoding/json reads, against chat read through ParseRequestFor, which must cost
// what ParseRequest does.
func BenchmarkParseRequestFor(b *testing.B) {
	chat := []byte(`{"model":"llama","stream":true,"max_tokens":64,"messages":[` +
		`{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`)
	responses := func(b *testing.B) []byte {
		items := []any{}
		for i := range 50 {
			role, typ := "user", "input_text"
			if i%2 == 1 {
				role, typ = "assistant", "output_text"
			}
			items = append(items, map[string]any{"type": "message", "role": role,
				"content": []map[string]any{{"type": typ, "text": benchText(4<<10, uint32(i))}}})
		}
		return mustMarshal(b, map[string]any{"model": "llama", "stream": true, "instructions": "Be brief.",
			"max_output_tokens": 512, "input": items})
	}
	embeddings := func(b *testing.B) []byte {
		inputs := make([]string, 200)
		for i := range inputs {
			inputs[i] = benchText(1<<10, uint32(i))
		}
		return mustMarshal(b, map[string]any{"model": "e5", "input": inputs})
	}
	for _, bc := range []struct {
		name string
		ep   openai.Endpoint
		body func(b *testing.B) []byte
	}{
		{"chat_short", openai.EndpointChatCompletions, func(*testing.B) []byte { return chat }},
		{"responses_multi_turn_200KB", openai.EndpointResponses, responses},
		{"embeddings_batch_200KB", openai.EndpointEmbeddings, embeddings},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchParse(b, bc.ep, bc.body(b), openai.PromptText)
		})
	}
}

// benchParse measures ParseRequestFor(ep, body, mode), after checking that it measures
// a prompt.
func benchParse(b *testing.B, ep openai.Endpoint, body []byte, mode openai.PromptMode) {
	if req, err := openai.ParseRequestFor(ep, body, mode); err != nil || req.PromptLen == 0 {
		b.Fatalf("ParseRequestFor() = %+v, %v", req, err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openai.ParseRequestFor(ep, body, mode); err != nil {
			b.Fatal(err)
		}
	}
}
