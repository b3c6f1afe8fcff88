package enginesim

import (
	"testing"
)

type rerankAnswer struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Usage   map[string]int `json:"usage"`
	Results []rerankResult `json:"results"`
}

type scoreAnswer = listAnswer[struct {
	listItem
	Score float64 `json:"score"`
}]

func TestRerank(t *testing.T) {
	te := startEngine(t, fastConfig())
	docs := []string{"the weather today", "A fast prefix cache.", "cache"}
	order := func(want ...int) func(*testing.T, string) {
		return func(t *testing.T, body string) {
			got := decode[rerankAnswer](t, body)
			if len(got.Results) != len(want) || got.Model != "llama-3-8b" || got.Usage["total_tokens"] == 0 {
				t.Fatalf("answer %+v, want %d results", got, len(want))
			}
			for i, r := range got.Results {
				if r.Index != want[i] || r.Document.Text != docs[r.Index] || (i > 0 && r.RelevanceScore > got.Results[i-1].RelevanceScore) {
					t.Fatalf("results %+v, want indices %v by descending score", got.Results, want)
				}
			}
		}
	}
	body := func(topN int) map[string]any {
		return map[string]any{"model": "llama-3-8b", "query": "fast prefix cache", "documents": docs, "top_n": topN}
	}
	runAPICases(t, te, []apiCase{
		{name: "all", path: "/v1/rerank", body: body(0), status: 200, check: order(1, 2, 0)},
		{name: "top n", path: "/rerank", body: body(2), status: 200, check: order(1, 2)},
		{name: "top n beyond", path: "/v2/rerank", body: body(9), status: 200, check: order(1, 2, 0)},
		{name: "no documents", path: "/v1/rerank", body: map[string]any{"model": "llama-3-8b", "query": "q", "documents": []string{}}, status: 400, contains: "documents must have"},
		{name: "documents not strings", path: "/v1/rerank", body: map[string]any{"model": "llama-3-8b", "query": "q", "documents": []int{1}}, status: 400, contains: "malformed JSON"},
	})
}

func TestScore(t *testing.T) {
	te := startEngine(t, fastConfig())
	scores := func(want ...float64) func(*testing.T, string) {
		return func(t *testing.T, body string) {
			got := decode[scoreAnswer](t, body)
			if got.Object != "list" || len(got.Data) != len(want) || got.Usage.PromptTokens == 0 || got.Usage.TotalTokens != got.Usage.PromptTokens {
				t.Fatalf("answer %+v, want %d scores", got, len(want))
			}
			for i, d := range got.Data {
				if d.Index != i || d.Object != "score" || d.Score != want[i] {
					t.Fatalf("data %+v, want scores %v", got.Data, want)
				}
			}
		}
	}
	body := func(text1, text2 any) map[string]any {
		return map[string]any{"model": "llama-3-8b", "text_1": text1, "text_2": text2}
	}
	runAPICases(t, te, []apiCase{
		{name: "1:1", path: "/score", body: body("a b", "A, b!"), status: 200, check: scores(1)},
		{name: "1:N", path: "/v1/score", body: body("a b", []string{"a b", "b c", "d"}), status: 200, check: scores(1, 1.0/3, 0)},
		{name: "N:N", path: "/v1/score", body: body([]string{"a", "b"}, []string{"b", "b"}), status: 200, check: scores(0, 1)},
		{name: "N:M", path: "/v1/score", body: body([]string{"a", "b"}, []string{"a", "b", "c"}), status: 400, contains: "Input lengths must be either 1:1, 1:N or N:N"},
		{name: "empty text_2", path: "/v1/score", body: body("a", []string{}), status: 400, contains: "text_2 must have"},
		{name: "missing text_1", path: "/v1/score", body: map[string]any{"model": "llama-3-8b", "text_2": "a"}, status: 400, contains: "text_1 and text_2 must"},
	})
}

func TestRelevance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want float64
	}{
		{"Fast cache", "cache, FAST", 1},
		{"a b c", "c d", 0.25},
		{"a", "b", 0},
		{"", "", 0},
	} {
		if got := relevance(c.a, c.b); got != c.want {
			t.Errorf("relevance(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
