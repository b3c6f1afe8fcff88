package enginesim

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"slices"
	"testing"

	"github.com/openai/openai-go/v3"
)

// listAnswer is the answer of embeddings and scores: a list of items with usage.
type listAnswer[T any] struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []T    `json:"data"`
	Usage  usage  `json:"usage"`
}

// listItem is the part every item of a listAnswer has.
type listItem struct {
	Index  int    `json:"index"`
	Object string `json:"object"`
}

type embeddingAnswer = listAnswer[struct {
	listItem
	Embedding any `json:"embedding"`
}]

func TestEmbeddingsWithSDK(t *testing.T) {
	te := startEngine(t, fastConfig())
	inputs := []string{"the first text", "a second, longer text", "the first text"}
	resp, err := te.client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model:      "llama-3-8b",
		Input:      openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs},
		Dimensions: openai.Int(8),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "list" || resp.Model != "llama-3-8b" || len(resp.Data) != 3 {
		t.Fatalf("unexpected response %+v", resp)
	}
	for i, d := range resp.Data {
		norm := 0.0
		for _, x := range d.Embedding {
			norm += x * x
		}
		if d.Index != int64(i) || len(d.Embedding) != 8 || !(math.Abs(norm-1) <= 1e-5) {
			t.Fatalf("embedding %d: index %d, %d dims, norm² %v; want a unit vector of 8", i, d.Index, len(d.Embedding), norm)
		}
	}
	if !slices.Equal(resp.Data[0].Embedding, resp.Data[2].Embedding) || slices.Equal(resp.Data[0].Embedding, resp.Data[1].Embedding) {
		t.Fatal("embeddings are not a function of the text")
	}
	want := CountTokens(inputs[0]) + CountTokens(inputs[1]) + CountTokens(inputs[2])
	if resp.Usage.PromptTokens != int64(want) || resp.Usage.TotalTokens != int64(want) {
		t.Fatalf("usage %+v, want %d prompt tokens", resp.Usage, want)
	}
	fams := te.metrics(t)
	if got := value(t, fams, "vllm:prompt_tokens_total"); got != float64(want) {
		t.Fatalf("prompt tokens metric %v, want %d", got, want)
	}
	if got := value(t, fams, "vllm:request_success_total"); got != 3 {
		t.Fatalf("request success %v, want one per input", got)
	}
}

func TestEmbeddingsShapes(t *testing.T) {
	te := startEngine(t, fastConfig())
	floats := func(t *testing.T, body string) []float64 {
		got := decode[embeddingAnswer](t, body)
		v, ok := got.Data[0].Embedding.([]any)
		if !ok {
			t.Fatalf("embedding %T, want a list of floats", got.Data[0].Embedding)
		}
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = x.(float64)
		}
		return out
	}
	reference := func() []float64 {
		_, body := te.post(t, "/v1/embeddings", map[string]any{"model": "llama-3-8b", "input": "hi there"})
		return floats(t, body)
	}()
	runAPICases(t, te, []apiCase{
		{name: "string", path: "/v1/embeddings", body: map[string]any{"model": "llama-3-8b", "input": "hi there"}, status: 200,
			check: func(t *testing.T, body string) {
				got := decode[embeddingAnswer](t, body)
				if got.Object != "list" || got.Data[0].Object != "embedding" || got.Usage.PromptTokens != 2 || got.Usage.CompletionTokens != 0 {
					t.Fatalf("shape %+v", got)
				}
				if len(floats(t, body)) != defaultEmbeddingDims {
					t.Fatalf("want %d dimensions by default", defaultEmbeddingDims)
				}
			}},
		{name: "base64", path: "/v1/embeddings", body: map[string]any{"model": "llama-3-8b", "input": "hi there", "encoding_format": "base64"}, status: 200,
			check: func(t *testing.T, body string) {
				b, err := base64.StdEncoding.DecodeString(decode[embeddingAnswer](t, body).Data[0].Embedding.(string))
				if err != nil || len(b) != 4*len(reference) {
					t.Fatalf("base64 embedding: %d bytes, %v", len(b), err)
				}
				for i, want := range reference {
					if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); got != float32(want) {
						t.Fatalf("component %d: base64 %v, float %v", i, got, want)
					}
				}
			}},
		{name: "token ids", path: "/v1/embeddings", body: map[string]any{"model": "llama-3-8b", "input": []int{1, 2, 3}}, status: 200,
			check: func(t *testing.T, body string) {
				if got := decode[embeddingAnswer](t, body); len(got.Data) != 1 || got.Usage.PromptTokens != 3 {
					t.Fatalf("want one embedding of 3 tokens, got %+v", got)
				}
			}},
		{name: "token-id lists", path: "/v1/embeddings", body: map[string]any{"model": "llama-3-8b", "input": [][]int{{1, 2}, {3}}}, status: 200,
			check: func(t *testing.T, body string) {
				if got := decode[embeddingAnswer](t, body); len(got.Data) != 2 || got.Data[1].Index != 1 || got.Usage.PromptTokens != 3 {
					t.Fatalf("want two embeddings of 3 tokens in all, got %+v", got)
				}
			}},
		{name: "empty list", path: "/v1/embeddings", body: map[string]any{"model": "llama-3-8b", "input": []string{}}, status: 400, contains: "between 1 and 2048"},
		{name: "missing input", path: "/v1/embeddings", body: map[string]any{"model": "llama-3-8b"}, status: 400, contains: "input must be"},
		{name: "object input", path: "/v1/embeddings", body: map[string]any{"model": "llama-3-8b", "input": map[string]int{}}, status: 400, contains: "input must be"},
		{name: "zero dimensions", path: "/v1/embeddings", body: map[string]any{"model": "llama-3-8b", "input": "x", "dimensions": 0}, status: 400, contains: "dimensions"},
		{name: "unknown format", path: "/v1/embeddings", body: map[string]any{"model": "llama-3-8b", "input": "x", "encoding_format": "bytes"}, status: 400, contains: "encoding_format"},
		{name: "malformed", path: "/v1/embeddings", body: `{"model":`, status: http.StatusBadRequest, contains: "malformed JSON"},
	})
}
