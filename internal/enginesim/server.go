package enginesim

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 16 << 20

// Handler returns the engine's HTTP API: the OpenAI endpoints (chat and text completions,
// responses, embeddings, audio transcriptions and translations, models), vLLM's scoring and
// tokenizer endpoints, the vLLM LoRA admin API, /health, /metrics and the fault-injection
// endpoint /admin/faults.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	api := map[string]http.HandlerFunc{
		"POST /v1/chat/completions":     e.handleCompletion(true),
		"POST /v1/completions":          e.handleCompletion(false),
		"POST /v1/responses":            e.handleResponses,
		"POST /v1/embeddings":           e.handleEmbeddings,
		"POST /v1/audio/transcriptions": e.handleAudio(transcription),
		"POST /v1/audio/translations":   e.handleAudio(translation),
		"POST /rerank":                  e.handleRerank,
		"POST /v1/rerank":               e.handleRerank,
		"POST /v2/rerank":               e.handleRerank,
		"POST /score":                   e.handleScore,
		"POST /v1/score":                e.handleScore,
		"POST /tokenize":                e.handleTokenize,
		"POST /detokenize":              e.handleDetokenize,
		"GET /v1/models":                e.handleModels,
		"POST /v1/load_lora_adapter":    e.handleLoadAdapter,
		"POST /v1/unload_lora_adapter":  e.handleUnloadAdapter,
	}
	for pattern, h := range api {
		mux.HandleFunc(pattern, e.authorized(h))
	}
	mux.HandleFunc("GET /health", e.handleHealth)
	mux.HandleFunc("GET /metrics", e.handleMetrics())
	mux.HandleFunc("GET /admin/faults", e.handleGetFaults)
	mux.HandleFunc("POST /admin/faults", e.handleSetFaults)
	return mux
}

// authorized requires the configured API key as a bearer token, answering 401 like vLLM.
func (e *Engine) authorized(next http.HandlerFunc) http.HandlerFunc {
	if e.cfg.APIKey == "" {
		return next
	}
	want := []byte("Bearer " + e.cfg.APIKey)
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
			return
		}
		next(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeText(w http.ResponseWriter, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, text)
}

func writeError(w http.ResponseWriter, status int, errType, msg string) {
	writeJSON(w, status, errorBody{Error: errorInfo{Message: msg, Type: errType, Code: status}})
}

func badRequest(w http.ResponseWriter, msg string) {
	writeError(w, http.StatusBadRequest, "BadRequestError", msg)
}

// decodeJSON decodes a bounded JSON body into v, answering 400 itself when it cannot.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(v); err != nil {
		badRequest(w, "malformed JSON body: "+err.Error())
		return false
	}
	return true
}

// decodeRequest decodes an inference request and requires its model to be served, answering
// the error itself when either fails. adapter is "" for the base model.
func (e *Engine) decodeRequest(w http.ResponseWriter, r *http.Request, req interface{ requestedModel() string }) (adapter string, ok bool) {
	if !decodeJSON(w, r, req) {
		return "", false
	}
	return e.requireModel(w, req.requestedModel())
}

// requireModel answers 404 like vLLM unless model is the base model or a loaded adapter;
// adapter is "" for the base model.
func (e *Engine) requireModel(w http.ResponseWriter, model string) (adapter string, ok bool) {
	if !e.servesModel(model) {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", model))
		return "", false
	}
	if model == e.cfg.Model {
		return "", true
	}
	return model, true
}

// injectedFailure answers 500 when the fail-fraction fault draws this request.
func (e *Engine) injectedFailure(w http.ResponseWriter) bool {
	if !e.faults.shouldFail() {
		return false
	}
	writeError(w, http.StatusInternalServerError, "InternalServerError", "injected failure")
	return true
}

// newID returns a response id unique within the engine.
func (e *Engine) newID(prefix string) string {
	return prefix + strconv.FormatInt(e.ids.Add(1), 10)
}

// errDropped stops a generation whose connection is dropped on purpose.
var errDropped = errors.New("connection dropped by fault injection")

// generateText runs g to completion and returns its text; ok is false when the client went
// away, leaving nothing to answer. Under the drop-mid-stream fault it aborts the connection
// before any byte of the answer.
func (e *Engine) generateText(ctx context.Context, g generation) (text string, res generationResult, ok bool) {
	var b strings.Builder
	res, err := e.generate(ctx, g, func(tok string) error {
		b.WriteString(tok)
		return nil
	})
	if err != nil {
		return "", res, false
	}
	if e.faults.get().DropMidStream {
		panic(http.ErrAbortHandler)
	}
	return b.String(), res, true
}

// streamTokens runs g, passing each token to emit; ok is false when the generation stopped
// early because emit failed or the client went away. Under the drop-mid-stream fault it
// aborts the connection after the first token.
func (e *Engine) streamTokens(ctx context.Context, g generation, emit func(token string) error) (res generationResult, ok bool) {
	sent := 0
	res, err := e.generate(ctx, g, func(tok string) error {
		if sent > 0 && e.faults.get().DropMidStream {
			return errDropped
		}
		sent++
		return emit(tok)
	})
	if errors.Is(err, errDropped) {
		panic(http.ErrAbortHandler)
	}
	return res, err == nil
}

func (e *Engine) handleCompletion(chat bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req completionRequest
		adapter, ok := e.decodeRequest(w, r, &req)
		if !ok {
			return
		}
		prompt := chatPrompt(req.Messages)
		if !chat {
			if prompt, ok = req.textPrompt(); !ok {
				badRequest(w, "prompt must be a string, a list of strings or a list of token ids")
				return
			}
		} else if len(req.Messages) == 0 {
			badRequest(w, "messages must not be empty")
			return
		}
		if e.injectedFailure(w) {
			return
		}
		g := generation{prompt: prompt, maxTokens: req.maxTokens(), adapter: adapter}
		c := completionWriter{chat: chat, id: e.newID(map[bool]string{true: "chatcmpl-", false: "cmpl-"}[chat]), model: req.Model, created: time.Now().Unix()}
		if req.Stream {
			e.stream(w, r, g, c, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
			return
		}
		if text, res, ok := e.generateText(r.Context(), g); ok {
			writeJSON(w, http.StatusOK, c.final(text, res))
		}
	}
}

func (e *Engine) stream(w http.ResponseWriter, r *http.Request, g generation, c completionWriter, includeUsage bool) {
	sse := newSSEWriter(w)
	// Like vLLM, a chat stream's first event, the assistant's role, goes out with the
	// first token, once the prompt is prefilled: a stream's first body bytes tell the
	// client, and a router, that the engine decodes the request.
	first := c.chat
	res, ok := e.streamTokens(r.Context(), g, func(tok string) error {
		if first {
			first = false
			if err := sse.send("", c.chunk(map[string]any{"role": "assistant", "content": ""}, nil)); err != nil {
				return err
			}
		}
		if c.chat {
			return sse.send("", c.chunk(map[string]any{"content": tok}, nil))
		}
		return sse.send("", c.chunk(tok, nil))
	})
	if !ok {
		return
	}
	reason := res.finishReason
	if c.chat {
		_ = sse.send("", c.chunk(map[string]any{}, &reason))
	} else {
		_ = sse.send("", c.chunk("", &reason))
	}
	if includeUsage {
		_ = sse.send("", c.usageChunk(res))
	}
	_ = sse.sendRaw("", []byte("[DONE]"))
}

func (e *Engine) handleModels(w http.ResponseWriter, _ *http.Request) {
	now := time.Now().Unix()
	base := e.cfg.Model
	cards := []modelCard{{ID: base, Object: "model", Created: now, OwnedBy: "vllm", Root: base}}
	e.mu.Lock()
	for _, name := range slices.Sorted(maps.Keys(e.adapters)) {
		cards = append(cards, modelCard{ID: name, Object: "model", Created: now, OwnedBy: "vllm", Root: e.adapters[name], Parent: &base})
	}
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": cards})
}

type loraRequest struct {
	LoRAName string `json:"lora_name"`
	LoRAPath string `json:"lora_path"`
}

func decodeLoRA(w http.ResponseWriter, r *http.Request) (loraRequest, bool) {
	var req loraRequest
	return req, decodeJSON(w, r, &req)
}

func writeLoRAResult(w http.ResponseWriter, err error, success string) {
	var le *loraError
	switch {
	case err == nil:
		writeText(w, success)
	case errors.As(err, &le):
		writeError(w, le.status, le.errType, le.message)
	default:
		writeError(w, http.StatusInternalServerError, "InternalServerError", err.Error())
	}
}

func (e *Engine) handleLoadAdapter(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeLoRA(w, r)
	if !ok {
		return
	}
	err := e.LoadAdapter(r.Context(), req.LoRAName, req.LoRAPath)
	writeLoRAResult(w, err, fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", req.LoRAName))
}

func (e *Engine) handleUnloadAdapter(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeLoRA(w, r)
	if !ok {
		return
	}
	if req.LoRAName == "" {
		badRequest(w, "'lora_name' must be provided.")
		return
	}
	err := e.UnloadAdapter(req.LoRAName)
	writeLoRAResult(w, err, fmt.Sprintf("Success: LoRA adapter '%s' removed successfully.", req.LoRAName))
}

func (e *Engine) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if !e.faults.ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleMetrics serves /metrics: a request for the uncompressed text format, as the
// scrapers send, gets the engine's cached page; any other, promhttp's negotiation.
func (e *Engine) handleMetrics() http.HandlerFunc {
	h := promhttp.HandlerFor(e.metrics.registry, promhttp.HandlerOpts{})
	return func(w http.ResponseWriter, r *http.Request) {
		if e.faults.get().MetricsHang {
			<-r.Context().Done()
			return
		}
		if ae := r.Header.Get("Accept-Encoding"); (ae != "" && ae != "identity") || expfmt.Negotiate(r.Header).FormatType() != expfmt.TypeTextPlain {
			h.ServeHTTP(w, r)
			return
		}
		text, err := e.metrics.text()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// With its length known, the page goes out in two writes (net/http's buffer, then
		// the rest) rather than as a chunk per buffer: a fleet of engines in one process,
		// scraped every 100 ms, spends most of its time in those writes.
		header := w.Header()
		header.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
		header.Set("Content-Length", strconv.Itoa(len(text)))
		_, _ = w.Write(text)
	}
}

func (e *Engine) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, e.faults.get())
}

func (e *Engine) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if !decodeJSON(w, r, &f) {
		return
	}
	if f.FailFraction < 0 || f.FailFraction > 1 {
		badRequest(w, "fail_fraction must be in [0,1]")
		return
	}
	e.SetFaults(f)
	writeJSON(w, http.StatusOK, f)
}
