package enginesim

import (
	"fmt"
	"math"
	"net/http"
)

// tokenizeRequest is a vLLM tokenize request: a completion prompt, or chat messages
// flattened as a chat completion flattens them.
type tokenizeRequest struct {
	completionRequest
	ReturnTokenStrs bool `json:"return_token_strs"`
}

type detokenizeRequest struct {
	modelRequest
	Tokens []int `json:"tokens"`
}

// maxModelLen is the longest sequence the engine holds: its whole KV cache.
func (e *Engine) maxModelLen() int { return e.cfg.KVBlocks * e.cfg.BlockSize }

// handleTokenize serves POST /tokenize with the engine's token model (see [tokenIDs]).
func (e *Engine) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if _, ok := e.decodeRequest(w, r, &req); !ok {
		return
	}
	prompt := chatPrompt(req.Messages)
	if len(req.Messages) == 0 {
		var ok bool
		if prompt, ok = req.textPrompt(); !ok {
			badRequest(w, "prompt must be a string, a list of strings or a list of token ids, or messages must be set")
			return
		}
	}
	ids := tokenIDs(prompt)
	var strs []string
	if req.ReturnTokenStrs {
		strs = make([]string, len(ids))
		for i, id := range ids {
			strs[i] = detokenize([]int{id})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": e.maxModelLen(), "tokens": ids, "token_strs": strs})
}

// handleDetokenize serves POST /detokenize, the inverse of /tokenize.
func (e *Engine) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if _, ok := e.decodeRequest(w, r, &req); !ok {
		return
	}
	for _, id := range req.Tokens {
		if id < 0 || id > math.MaxUint32 {
			badRequest(w, fmt.Sprintf("token id %d is out of vocabulary", id))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": detokenize(req.Tokens)})
}
