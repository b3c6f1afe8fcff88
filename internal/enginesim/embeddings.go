package enginesim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/cespare/xxhash/v2"
)

const (
	// defaultEmbeddingDims is the length of an embedding when a request sets no dimensions.
	defaultEmbeddingDims = 16
	// maxEmbeddingDims bounds a request's dimensions.
	maxEmbeddingDims = 4096
	// maxBatch bounds the prompts of one pooling request (inputs, documents or text pairs),
	// as OpenAI bounds embedding inputs.
	maxBatch = 2048
)

// embeddingRequest is an OpenAI embeddings request.
type embeddingRequest struct {
	modelRequest
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// handleEmbeddings serves POST /v1/embeddings: one unit-length pseudo-embedding per input,
// a deterministic function of the model, the input text and the dimensions.
func (e *Engine) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	adapter, ok := e.decodeRequest(w, r, &req)
	if !ok {
		return
	}
	inputs, ok := promptList(req.Input)
	if !ok {
		badRequest(w, "input must be a string, a list of strings, a list of token ids or a list of token-id lists")
		return
	}
	dims := defaultEmbeddingDims
	if req.Dimensions != nil {
		dims = *req.Dimensions
	}
	switch {
	case !checkBatch(w, "input", len(inputs)):
		return
	case dims < 1 || dims > maxEmbeddingDims:
		badRequest(w, "dimensions must be between 1 and 4096")
		return
	case req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64":
		badRequest(w, "encoding_format must be float or base64")
		return
	case e.injectedFailure(w):
		return
	}
	tokens, err := e.encode(r.Context(), inputs, adapter)
	if err != nil {
		return // the client went away
	}
	data := make([]map[string]any, len(inputs))
	for i, input := range inputs {
		emb := pseudoEmbedding(req.Model, input, dims)
		data[i] = map[string]any{"index": i, "object": "embedding", "embedding": emb}
		if req.EncodingFormat == "base64" {
			data[i]["embedding"] = base64Embedding(emb)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": e.newID("embd-"), "object": "list", "created": time.Now().Unix(), "model": req.Model,
		"data": data, "usage": poolingUsage(totalTokens(tokens)),
	})
}

// checkBatch answers 400 unless a pooling request's list named field has 1 to maxBatch items.
func checkBatch(w http.ResponseWriter, field string, n int) bool {
	if n < 1 || n > maxBatch {
		badRequest(w, field+" must have between 1 and 2048 items")
		return false
	}
	return true
}

// pseudoEmbedding is a unit vector of dims components drawn from a generator seeded by the
// model and the text.
func pseudoEmbedding(model, text string, dims int) []float32 {
	d := xxhash.New()
	_, _ = d.WriteString(model)
	_, _ = d.WriteString("\x00")
	_, _ = d.WriteString(text)
	rng := rand.New(rand.NewPCG(d.Sum64(), 0xe5bed))
	v := make([]float64, dims)
	norm := 0.0
	for i := range v {
		v[i] = rng.NormFloat64()
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}

// base64Embedding encodes an embedding as OpenAI does: little-endian float32s in base64.
func base64Embedding(v []float32) string {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}
