package metadata

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/openai"
)

// Reader is what the API reads from the metadata cache. *cache.Metadata implements it.
// Every value it returns MUST be immutable or fresh, since requests read concurrently.
type Reader interface {
	// Models returns the sorted names of the served base models and adapters.
	Models() []string
	// Model returns the model named name while at least one routable pod serves it.
	Model(name string) (*cache.Model, bool)
	// ListPods returns every known engine pod, routable or not, in any order.
	ListPods() []*cache.Pod
	// StaleAfter returns the age beyond which a metrics snapshot is stale.
	StaleAfter() time.Duration
	// Synced reports whether the cache holds the cluster's state as first listed.
	Synced() bool
}

var _ Reader = (*cache.Metadata)(nil)

// Options configure the handler NewHandler returns. The zero value is valid.
type Options struct {
	// Now returns the current time, used for metrics ages and staleness and for the
	// models' created field. Defaults to time.Now.
	Now func() time.Time
}

// allowedMethods is the Allow header of a 405 answer: every route is read-only.
const allowedMethods = "GET, HEAD"

// handler serves the API. It holds no mutable state: each request reads the Reader.
type handler struct {
	view Reader
	now  func() time.Time
	// created is the created field of every model: the cache does not record when a
	// model first appeared, so the API reports when the handler was built.
	created int64
}

// NewHandler returns the metadata API over view:
//
//   - GET /v1/models answers {"object":"list","data":[model...]} with one model object
//     {"id","object":"model","created","owned_by":"switchboard","parent"} per base model
//     and adapter that has at least one routable endpoint, sorted by id; parent is the
//     base model of an adapter and null for a base model.
//   - GET /v1/models/{model} answers that model object, or 404 model_not_found.
//   - GET /v1/endpoints answers {"object":"list","data":[endpoint...]} with every known
//     engine pod, routable or not, sorted by namespace and name; ?model=NAME keeps the
//     pods whose base model is NAME or that have the adapter NAME loaded. An endpoint's
//     metrics are null before its first scrape and carry age_seconds and stale (older
//     than view.StaleAfter()) afterwards.
//
// Until view is synced, these routes answer 503 not_ready rather than lists that would
// look empty. HEAD is answered like GET. Other methods get 405 with an Allow header,
// unknown paths 404; every error body is OpenAI-shaped. The handler is safe for
// concurrent use.
func NewHandler(view Reader, opts Options) http.Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &handler{view: view, now: opts.Now, created: opts.Now().Unix()}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", h.route(h.listModels))
	mux.HandleFunc("/v1/models/{model}", h.route(h.getModel))
	mux.HandleFunc("/v1/endpoints", h.route(h.listEndpoints))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, http.StatusNotFound, "invalid_request_error", "not_found",
			fmt.Sprintf("Unknown path %s.", r.URL.Path))
	})
	return mux
}

// route answers methods other than GET and HEAD with 405, and every request with 503
// until the view is synced; it serves the rest with next.
func (h *handler) route(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			w.Header().Set("Allow", allowedMethods)
			openai.WriteError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed",
				fmt.Sprintf("Method %s is not allowed on %s; use GET.", r.Method, r.URL.Path))
		case !h.view.Synced():
			openai.WriteError(w, http.StatusServiceUnavailable, "server_error", "not_ready",
				"The metadata cache has not synced with the cluster yet; retry shortly.")
		default:
			next(w, r)
		}
	}
}

// listModels serves GET /v1/models.
func (h *handler) listModels(w http.ResponseWriter, _ *http.Request) {
	var data []openai.Model
	for _, name := range h.view.Models() {
		// A model may lose its last endpoint between the two reads; it is then gone.
		if m, ok := h.view.Model(name); ok {
			data = append(data, openai.NewModel(m.Name, m.BaseModel, h.created))
		}
	}
	writeJSON(w, openai.NewList(data))
}

// getModel serves GET /v1/models/{model}.
func (h *handler) getModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	m, ok := h.view.Model(name)
	if !ok {
		openai.WriteError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
			fmt.Sprintf("The model `%s` does not exist or has no ready endpoint.", name))
		return
	}
	writeJSON(w, openai.NewModel(m.Name, m.BaseModel, h.created))
}

// endpointObject describes one engine pod.
type endpointObject struct {
	Namespace   string           `json:"namespace"`
	Name        string           `json:"name"`
	Address     string           `json:"address"`
	Port        int32            `json:"port"`
	Model       string           `json:"model"`
	Engine      endpoint.Engine  `json:"engine"`
	Ready       bool             `json:"ready"`
	Terminating bool             `json:"terminating"`
	Routable    bool             `json:"routable"`
	Adapters    []string         `json:"adapters"`
	InFlight    int64            `json:"in_flight"`
	Metrics     *metricsSnapshot `json:"metrics"`
}

// metricsSnapshot is one engine metrics scrape as the API shows it. Histogram means are
// over the engine's lifetime.
type metricsSnapshot struct {
	Running               number     `json:"running"`
	Waiting               number     `json:"waiting"`
	KVCacheUsage          number     `json:"kv_cache_usage"`
	PrefixCacheHitRate    number     `json:"prefix_cache_hit_rate"`
	TTFTMeanSeconds       number     `json:"ttft_mean_seconds"`
	TPOTMeanSeconds       number     `json:"tpot_mean_seconds"`
	E2EMeanSeconds        number     `json:"e2e_mean_seconds"`
	PromptTokensTotal     number     `json:"prompt_tokens_total"`
	GenerationTokensTotal number     `json:"generation_tokens_total"`
	BlockSize             int        `json:"block_size"`
	NumGPUBlocks          int        `json:"num_gpu_blocks"`
	LoRA                  loraObject `json:"lora"`
	ScrapedAt             time.Time  `json:"scraped_at"`
	AgeSeconds            number     `json:"age_seconds"`
	Stale                 bool       `json:"stale"`
}

// loraObject is the engine's adapter scheduling state.
type loraObject struct {
	Running []string `json:"running"`
	Waiting []string `json:"waiting"`
	MaxLoRA int      `json:"max_lora"`
}

// listEndpoints serves GET /v1/endpoints[?model=NAME].
func (h *handler) listEndpoints(w http.ResponseWriter, r *http.Request) {
	model := r.URL.Query().Get("model")
	pods := h.view.ListPods()
	slices.SortFunc(pods, func(a, b *cache.Pod) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Name, b.Key.Name))
	})
	now, staleAfter := h.now(), h.view.StaleAfter()
	data := make([]endpointObject, 0, len(pods))
	for _, p := range pods {
		if model != "" && p.BaseModel != model && !slices.Contains(p.Adapters, model) {
			continue
		}
		data = append(data, endpointObject{
			Namespace:   p.Key.Namespace,
			Name:        p.Key.Name,
			Address:     p.Address,
			Port:        p.Port,
			Model:       p.BaseModel,
			Engine:      p.Engine,
			Ready:       p.Ready,
			Terminating: p.Terminating,
			Routable:    p.Routable(),
			Adapters:    nonNil(p.Adapters),
			InFlight:    p.Load().InFlight(),
			Metrics:     snapshotOf(p.Metrics(), now, staleAfter),
		})
	}
	writeJSON(w, openai.NewList(data))
}

// snapshotOf describes m as seen at now, or returns nil when m is nil.
func snapshotOf(m *endpoint.Metrics, now time.Time, staleAfter time.Duration) *metricsSnapshot {
	if m == nil {
		return nil
	}
	return &metricsSnapshot{
		Running:               number(m.Running),
		Waiting:               number(m.Waiting),
		KVCacheUsage:          number(m.KVCacheUsage),
		PrefixCacheHitRate:    number(m.PrefixCacheHitRate),
		TTFTMeanSeconds:       number(m.TTFT.Mean()),
		TPOTMeanSeconds:       number(m.TPOT.Mean()),
		E2EMeanSeconds:        number(m.E2E.Mean()),
		PromptTokensTotal:     number(m.PromptTokens),
		GenerationTokensTotal: number(m.GenerationTokens),
		BlockSize:             m.BlockSize,
		NumGPUBlocks:          m.NumGPUBlocks,
		LoRA: loraObject{
			Running: nonNil(m.LoRA.Running),
			Waiting: nonNil(m.LoRA.Waiting),
			MaxLoRA: m.LoRA.MaxLoRA,
		},
		ScrapedAt:  m.ScrapedAt.UTC(),
		AgeSeconds: number(now.Sub(m.ScrapedAt).Seconds()),
		Stale:      m.Stale(now, staleAfter),
	}
}

// number is a float64 that encodes as JSON null when it is NaN or infinite, which
// engines may export and encoding/json cannot represent.
type number float64

// MarshalJSON encodes n as a JSON number, or null when it is not finite.
func (n number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// nonNil returns s, or an empty slice when s is nil, so that lists encode as [].
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// writeJSON answers 200 with v encoded as JSON. Encoding the package's own types cannot
// fail; write errors mean the client has gone away and are ignored.
func writeJSON(w http.ResponseWriter, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		openai.WriteError(w, http.StatusInternalServerError, "server_error", "internal_error",
			"encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}
