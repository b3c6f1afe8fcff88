package enginesim

import (
	"bufio"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 16 << 20

// Handler returns the engine's HTTP API: the OpenAI endpoints, the vLLM LoRA admin API,
// /health, /metrics and the fault-injection endpoint /admin/faults.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", e.authorized(e.handleCompletion(true)))
	mux.HandleFunc("POST /v1/completions", e.authorized(e.handleCompletion(false)))
	mux.HandleFunc("GET /v1/models", e.authorized(e.handleModels))
	mux.HandleFunc("POST /v1/load_lora_adapter", e.authorized(e.handleLoadAdapter))
	mux.HandleFunc("POST /v1/unload_lora_adapter", e.authorized(e.handleUnloadAdapter))
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

func writeError(w http.ResponseWriter, status int, errType, msg string) {
	writeJSON(w, status, errorBody{Error: errorInfo{Message: msg, Type: errType, Code: status}})
}

// newID returns a response id unique within the engine.
func (e *Engine) newID(prefix string) string {
	return prefix + strconv.FormatInt(e.ids.Add(1), 10)
}

func (e *Engine) handleCompletion(chat bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req completionRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "BadRequestError", "malformed JSON body: "+err.Error())
			return
		}
		if !e.servesModel(req.Model) {
			writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
			return
		}
		prompt := req.chatPrompt()
		if !chat {
			var ok bool
			if prompt, ok = req.textPrompt(); !ok {
				writeError(w, http.StatusBadRequest, "BadRequestError", "prompt must be a string, a list of strings or a list of token ids")
				return
			}
		} else if len(req.Messages) == 0 {
			writeError(w, http.StatusBadRequest, "BadRequestError", "messages must not be empty")
			return
		}
		if e.faults.shouldFail() {
			writeError(w, http.StatusInternalServerError, "InternalServerError", "injected failure")
			return
		}
		adapter := ""
		if req.Model != e.cfg.Model {
			adapter = req.Model
		}
		g := generation{prompt: prompt, maxTokens: req.maxTokens(), adapter: adapter}
		c := completionWriter{chat: chat, id: e.newID(map[bool]string{true: "chatcmpl-", false: "cmpl-"}[chat]), model: req.Model, created: time.Now().Unix()}
		if req.Stream {
			e.stream(w, r, g, c, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
			return
		}
		var text []byte
		res, err := e.generate(r.Context(), g, func(tok string) error {
			text = append(text, tok...)
			return nil
		})
		if err != nil {
			return // the client went away
		}
		if e.faults.get().DropMidStream {
			panic(http.ErrAbortHandler)
		}
		writeJSON(w, http.StatusOK, c.final(string(text), res))
	}
}

// errDropped stops a generation whose connection is dropped on purpose.
var errDropped = errors.New("connection dropped by fault injection")

func (e *Engine) stream(w http.ResponseWriter, r *http.Request, g generation, c completionWriter, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	rc := http.NewResponseController(w)
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(bw, "data: %s\n\n", b); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	if c.chat {
		if send(c.chunk(map[string]any{"role": "assistant", "content": ""}, nil)) != nil {
			return
		}
	}
	sent := 0
	res, err := e.generate(r.Context(), g, func(tok string) error {
		if sent > 0 && e.faults.get().DropMidStream {
			return errDropped
		}
		sent++
		if c.chat {
			return send(c.chunk(map[string]any{"content": tok}, nil))
		}
		return send(c.chunk(tok, nil))
	})
	if errors.Is(err, errDropped) {
		panic(http.ErrAbortHandler)
	}
	if err != nil {
		return
	}
	reason := res.finishReason
	var last any
	if c.chat {
		last = c.chunk(map[string]any{}, &reason)
	} else {
		last = c.chunk("", &reason)
	}
	if send(last) != nil {
		return
	}
	if includeUsage {
		if send(c.usageChunk(res)) != nil {
			return
		}
	}
	_, _ = io.WriteString(bw, "data: [DONE]\n\n")
	_ = bw.Flush()
	_ = rc.Flush()
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

func (e *Engine) decodeLoRA(w http.ResponseWriter, r *http.Request) (loraRequest, bool) {
	var req loraRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "malformed JSON body: "+err.Error())
		return req, false
	}
	return req, true
}

func writeLoRAResult(w http.ResponseWriter, err error, success string) {
	var le *loraError
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, success)
	case errors.As(err, &le):
		writeError(w, le.status, le.errType, le.message)
	default:
		writeError(w, http.StatusInternalServerError, "InternalServerError", err.Error())
	}
}

func (e *Engine) handleLoadAdapter(w http.ResponseWriter, r *http.Request) {
	req, ok := e.decodeLoRA(w, r)
	if !ok {
		return
	}
	err := e.LoadAdapter(r.Context(), req.LoRAName, req.LoRAPath)
	writeLoRAResult(w, err, fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", req.LoRAName))
}

func (e *Engine) handleUnloadAdapter(w http.ResponseWriter, r *http.Request) {
	req, ok := e.decodeLoRA(w, r)
	if !ok {
		return
	}
	if req.LoRAName == "" {
		writeError(w, http.StatusBadRequest, "BadRequestError", "'lora_name' must be provided.")
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

func (e *Engine) handleMetrics() http.HandlerFunc {
	h := promhttp.HandlerFor(e.metrics.registry, promhttp.HandlerOpts{})
	return func(w http.ResponseWriter, r *http.Request) {
		if e.faults.get().MetricsHang {
			<-r.Context().Done()
			return
		}
		h.ServeHTTP(w, r)
	}
}

func (e *Engine) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, e.faults.get())
}

func (e *Engine) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&f); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "malformed JSON body: "+err.Error())
		return
	}
	if f.FailFraction < 0 || f.FailFraction > 1 {
		writeError(w, http.StatusBadRequest, "BadRequestError", "fail_fraction must be in [0,1]")
		return
	}
	e.SetFaults(f)
	writeJSON(w, http.StatusOK, f)
}
