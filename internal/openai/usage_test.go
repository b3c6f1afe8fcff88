package openai

import (
	"fmt"
	"strings"
	"testing"
)

// event renders one server-sent event with data as its data line.
func event(data string) string { return "data: " + data + "\n\n" }

// sse renders an event stream's end: an event for each data, then [DONE].
func sse(data ...string) string {
	var b strings.Builder
	for _, d := range data {
		b.WriteString(event(d))
	}
	b.WriteString(event("[DONE]"))
	return b.String()
}

const (
	chatBody = `{"id":"chatcmpl-1","object":"chat.completion","created":1764840012,"model":"llama-3-8b",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop","logprobs":null}],` +
		`"usage":{"prompt_tokens":300,"completion_tokens":2,"total_tokens":302,"prompt_tokens_details":{"cached_tokens":256}},` +
		`"prompt_logprobs":null,"kv_transfer_params":null}` + "\n"
	roleChunk  = `{"id":"chatcmpl-2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`
	tokenChunk = `{"id":"chatcmpl-2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}`
	finalChunk = `{"id":"chatcmpl-2","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`
	usageChunk = `{"id":"chatcmpl-2","object":"chat.completion.chunk","choices":[],` +
		`"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":32}}}`
)

func TestUsageScanner(t *testing.T) {
	long := strings.Repeat("a long answer ", 8<<10) // 112 KiB, many times the tail
	var manyTokens []string                         // ~25 KiB in small writes
	for range 200 {
		manyTokens = append(manyTokens, event(tokenChunk))
	}
	tests := []struct {
		name   string
		writes []string
		want   Usage
		ok     bool
	}{
		{name: "nothing written"},
		{name: "chat completion body", writes: []string{chatBody}, want: Usage{300, 256}, ok: true},
		{
			name:   "indented body",
			writes: []string{"{\n  \"usage\" : {\n    \"prompt_tokens\": 9,\n    \"prompt_tokens_details\": {\n      \"cached_tokens\": 8\n    }\n  }\n}\n"},
			want:   Usage{9, 8}, ok: true,
		},
		{
			name:   "stream with a final usage chunk",
			writes: []string{event(roleChunk), event(tokenChunk), event(finalChunk), sse(usageChunk)},
			want:   Usage{40, 32}, ok: true,
		},
		{
			name:   "stream with usage null in every chunk before the usage chunk",
			writes: []string{sse(strings.Replace(tokenChunk, `]}`, `],"usage":null}`, 1), strings.Replace(finalChunk, `]}`, `],"usage":null}`, 1), usageChunk)},
			want:   Usage{40, 32}, ok: true,
		},
		{name: "stream without usage", writes: []string{sse(roleChunk, tokenChunk, finalChunk)}},
		{
			name:   "usage null only",
			writes: []string{sse(strings.Replace(finalChunk, `]}`, `],"usage":null}`, 1))},
		},
		{
			name:   "usage with null details",
			writes: []string{`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":1,"prompt_tokens_details":null}}`},
			want:   Usage{PromptTokens: 12},
		},
		{
			name:   "usage without details",
			writes: []string{`{"object":"list","data":[],"usage":{"prompt_tokens":7,"total_tokens":7}}`},
			want:   Usage{PromptTokens: 7},
		},
		{
			name:   "cached tokens not an integer",
			writes: []string{`{"usage":{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":"5"}}}`},
		},
		{
			name:   "usage split across two writes",
			writes: []string{chatBody[:strings.Index(chatBody, "cached_")+3], chatBody[strings.Index(chatBody, "cached_")+3:]},
			want:   Usage{300, 256}, ok: true,
		},
		{
			name:   "usage key split across two writes",
			writes: []string{chatBody[:strings.Index(chatBody, `"usage"`)+3], chatBody[strings.Index(chatBody, `"usage"`)+3:]},
			want:   Usage{300, 256}, ok: true,
		},
		{
			name:   "body larger than the tail with usage at the end",
			writes: []string{chatBody[:strings.Index(chatBody, "Hello!")] + long, chatBody[strings.Index(chatBody, "Hello!"):]},
			want:   Usage{300, 256}, ok: true,
		},
		{
			name:   "long stream of small writes",
			writes: append(manyTokens, sse(usageChunk)),
			want:   Usage{40, 32}, ok: true,
		},
		{
			name:   "usage that began before the tail",
			writes: []string{`{"usage":{"prompt_tokens":1,"note":"` + long + `","prompt_tokens_details":{"cached_tokens":1}}}`},
		},
		{
			name:   "usage inside generated text",
			writes: []string{sse(strings.Replace(tokenChunk, `" token"`, `"say \"usage\": {\"prompt_tokens\": 3, \"prompt_tokens_details\": {\"cached_tokens\": 3}}"`, 1))},
		},
		{
			name:   "usage after an escaped backslash inside generated text",
			writes: []string{`{"content":"a \\\"usage\\\": {\"prompt_tokens\": 3, \"prompt_tokens_details\": {\"cached_tokens\": 3}}"}`},
		},
		{
			name:   "braces inside strings of the usage object",
			writes: []string{`{"usage":{"note":"}{\"}","prompt_tokens":6,"prompt_tokens_details":{"cached_tokens":2}}}`},
			want:   Usage{6, 2}, ok: true,
		},
		{
			name:   "a string ending in a backslash before the key",
			writes: []string{`{"text":"ends with a backslash \\","usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}`},
			want:   Usage{5, 4}, ok: true,
		},
		{
			name:   "usage as a string value",
			writes: []string{`{"usage":{"prompt_tokens":2,"prompt_tokens_details":{"cached_tokens":1}},"kind":"usage"}`},
			want:   Usage{2, 1}, ok: true,
		},
		{
			name: "the last usage wins",
			writes: []string{sse(
				strings.Replace(usageChunk, `"cached_tokens":32`, `"cached_tokens":16`, 1),
				strings.Replace(usageChunk, `"prompt_tokens":40`, `"prompt_tokens":48`, 1),
			)},
			want: Usage{48, 32}, ok: true,
		},
		{
			name:   "an incomplete last usage gives way to the one before",
			writes: []string{event(usageChunk), `data: {"choices":[],"usage":{"prompt_tokens":41,"prompt_tokens_de`},
			want:   Usage{40, 32}, ok: true,
		},
		{
			name:   "invalid usage object",
			writes: []string{`{"usage":{"prompt_tokens":5,,"prompt_tokens_details":{"cached_tokens":4}}}`},
		},
		{name: "garbage", writes: []string{"\x00\xff\"usage\"::{{{[[\"\\", `"usage":{]`, `"usage" {"cached_tokens":1}`, "}}}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s UsageScanner
			total := 0
			for _, w := range tt.writes {
				if n, err := s.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", len(w), n, err)
				}
				total += len(w)
			}
			if len(s.tail) > 2*usageTail {
				t.Errorf("kept %d bytes, want at most %d", len(s.tail), 2*usageTail)
			}
			got, ok := s.Usage()
			if got != tt.want || ok != tt.ok {
				t.Errorf("Usage() = %+v, %v, want %+v, %v", got, ok, tt.want, tt.ok)
			}
			if total >= usageTail {
				return
			}
			// Everything is kept: a byte at a time must give the same answer.
			var bytewise UsageScanner
			for _, w := range tt.writes {
				for i := range len(w) {
					_, _ = bytewise.Write([]byte{w[i]})
				}
			}
			if got, ok := bytewise.Usage(); got != tt.want || ok != tt.ok {
				t.Errorf("byte by byte: Usage() = %+v, %v, want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestUsageScannerReset(t *testing.T) {
	var s UsageScanner
	_, _ = s.Write([]byte(chatBody))
	s.Reset()
	if u, ok := s.Usage(); ok || u != (Usage{}) {
		t.Errorf("after Reset, Usage() = %+v, %v, want nothing", u, ok)
	}
	_, _ = s.Write([]byte(sse(usageChunk)))
	if u, ok := s.Usage(); !ok || u != (Usage{40, 32}) {
		t.Errorf("after Reset and a stream, Usage() = %+v, %v", u, ok)
	}
}

func TestUsageScannerWriteDoesNotAllocate(t *testing.T) {
	var s UsageScanner
	_, _ = s.Write([]byte("x"))
	for _, size := range []int{1, 100, usageTail - 1, usageTail, 32 << 10} {
		chunk := make([]byte, size)
		if n := testing.AllocsPerRun(100, func() { _, _ = s.Write(chunk) }); n != 0 {
			t.Errorf("Write of %d bytes allocates %v times, want 0", size, n)
		}
	}
}

func FuzzUsageScanner(f *testing.F) {
	f.Add([]byte(chatBody), uint16(100))
	f.Add([]byte(sse(roleChunk, tokenChunk, finalChunk, usageChunk)), uint16(300))
	f.Add([]byte(`"usage":{"prompt_tokens_details":{"cached_tokens":1}`), uint16(3))
	f.Add([]byte(`\"usage":{"a":"\\"}}`), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		k := int(split) % (len(data) + 1)
		var s UsageScanner
		if n, err := s.Write(data[:k]); n != k || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if n, err := s.Write(data[k:]); n != len(data)-k || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		got, ok := s.Usage()
		if len(data) >= usageTail {
			return
		}
		var whole UsageScanner
		_, _ = whole.Write(data)
		if want, wantOK := whole.Usage(); got != want || ok != wantOK {
			t.Fatalf("split at %d: Usage() = %+v, %v; in one write %+v, %v", k, got, ok, want, wantOK)
		}
	})
}

func BenchmarkUsageScannerWrite(b *testing.B) {
	for _, size := range []int{256, 32 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			chunk := []byte(strings.Repeat("x", size))
			var s UsageScanner
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = s.Write(chunk)
			}
		})
	}
}
