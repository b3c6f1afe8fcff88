package enginesim

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Scoring runs each (query, document) pair as one prompt, the query followed by the
// document, as a cross-encoder does, so documents of one query share a cached prefix. The
// score is [relevance].

// rerankRequest is a vLLM rerank request (Jina and Cohere compatible).
type rerankRequest struct {
	modelRequest
	Query     string   `json:"query"`
	Documents []string `json:"documents"`
	TopN      int      `json:"top_n"`
}

// rerankResult is one document of a rerank answer.
type rerankResult struct {
	Index          int            `json:"index"`
	Document       rerankDocument `json:"document"`
	RelevanceScore float64        `json:"relevance_score"`
}

type rerankDocument struct {
	Text string `json:"text"`
}

// scoreRequest is a vLLM score request: text_1 and text_2 are each a string or a list of
// strings, paired 1:1, 1:N or N:N.
type scoreRequest struct {
	modelRequest
	Text1 json.RawMessage `json:"text_1"`
	Text2 json.RawMessage `json:"text_2"`
}

// handleRerank serves POST /rerank, /v1/rerank and /v2/rerank: the documents with their
// relevance to the query, most relevant first, at most top_n of them when it is positive.
func (e *Engine) handleRerank(w http.ResponseWriter, r *http.Request) {
	var req rerankRequest
	adapter, ok := e.decodeRequest(w, r, &req)
	if !ok || !checkBatch(w, "documents", len(req.Documents)) || e.injectedFailure(w) {
		return
	}
	queries := slices.Repeat([]string{req.Query}, len(req.Documents))
	tokens, err := e.encode(r.Context(), pairPrompts(queries, req.Documents), adapter)
	if err != nil {
		return // the client went away
	}
	results := make([]rerankResult, len(req.Documents))
	for i, doc := range req.Documents {
		results[i] = rerankResult{Index: i, Document: rerankDocument{doc}, RelevanceScore: relevance(req.Query, doc)}
	}
	slices.SortStableFunc(results, func(a, b rerankResult) int { return cmp.Compare(b.RelevanceScore, a.RelevanceScore) })
	if req.TopN > 0 && req.TopN < len(results) {
		results = results[:req.TopN]
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": e.newID("rerank-"), "model": req.Model,
		"usage": map[string]int{"total_tokens": totalTokens(tokens)}, "results": results,
	})
}

// handleScore serves POST /score and /v1/score: the relevance of each text pair, in order.
func (e *Engine) handleScore(w http.ResponseWriter, r *http.Request) {
	var req scoreRequest
	adapter, ok := e.decodeRequest(w, r, &req)
	if !ok {
		return
	}
	texts1, ok1 := promptList(req.Text1)
	texts2, ok2 := promptList(req.Text2)
	switch {
	case !ok1 || !ok2:
		badRequest(w, "text_1 and text_2 must each be a string or a list of strings")
		return
	case len(texts1) > 1 && len(texts1) != len(texts2):
		badRequest(w, "Input lengths must be either 1:1, 1:N or N:N")
		return
	case !checkBatch(w, "text_1", len(texts1)) || !checkBatch(w, "text_2", len(texts2)) || e.injectedFailure(w):
		return
	}
	if len(texts1) == 1 {
		texts1 = slices.Repeat(texts1, len(texts2))
	}
	tokens, err := e.encode(r.Context(), pairPrompts(texts1, texts2), adapter)
	if err != nil {
		return // the client went away
	}
	data := make([]map[string]any, len(texts2))
	for i := range texts2 {
		data[i] = map[string]any{"index": i, "object": "score", "score": relevance(texts1[i], texts2[i])}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": e.newID("score-"), "object": "list", "created": time.Now().Unix(), "model": req.Model,
		"data": data, "usage": poolingUsage(totalTokens(tokens)),
	})
}

// pairPrompts are the prompts of the text pairs (a[i], b[i]).
func pairPrompts(a, b []string) []string {
	prompts := make([]string, len(a))
	for i := range a {
		prompts[i] = a[i] + "\n" + b[i]
	}
	return prompts
}

// relevance is the simulated score of a text pair: the Jaccard similarity of their sets of
// lower-cased words, in [0, 1], 1 when they have the same words and 0 when none in common.
func relevance(a, b string) float64 {
	wordsA, wordsB := words(a), words(b)
	common := 0
	for w := range wordsA {
		if wordsB[w] {
			common++
		}
	}
	union := len(wordsA) + len(wordsB) - common
	if union == 0 {
		return 0
	}
	return float64(common) / float64(union)
}

func words(text string) map[string]bool {
	set := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		set[w] = true
	}
	return set
}
