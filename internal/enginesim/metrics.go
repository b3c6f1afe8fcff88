package enginesim

import (
	"bytes"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// engineMetrics are the engine's Prometheus series, named and typed like vLLM's and
// registered in the engine's own registry.
//
// Every update of the series is followed by a call of changed, so that text can keep the
// last rendered page until the series change: a fleet of idle engines scraped every
// 100 ms then costs a copy per scrape, not a Gather and an encoding.
type engineMetrics struct {
	registry         *prometheus.Registry
	running          prometheus.Gauge
	waiting          prometheus.Gauge
	kvUsage          prometheus.Gauge
	prefixQueries    prometheus.Counter
	prefixHits       prometheus.Counter
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	ttft             prometheus.Observer
	timePerOutputTok prometheus.Observer
	e2eLatency       prometheus.Observer
	queueTime        prometheus.Observer
	prefillTime      prometheus.Observer
	decodeTime       prometheus.Observer
	inferenceTime    prometheus.Observer
	loraInfo         *prometheus.GaugeVec
	requestSuccess   *prometheus.CounterVec
	maxLoRAs         string

	// version counts the calls of changed; page is the text rendered at a version.
	version atomic.Uint64
	page    atomic.Pointer[renderedPage]
}

// renderedPage is the text exposition of the series at version.
type renderedPage struct {
	version uint64
	text    []byte
}

// changed records that series were updated.
func (m *engineMetrics) changed() { m.version.Add(1) }

// text returns the series in the text exposition format, rendered again only when they
// changed since the last rendering.
func (m *engineMetrics) text() ([]byte, error) {
	v := m.version.Load() // before gathering: an update meanwhile renders again next time
	if p := m.page.Load(); p != nil && p.version == v {
		return p.text, nil
	}
	families, err := m.registry.Gather()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	m.page.Store(&renderedPage{version: v, text: buf.Bytes()})
	return buf.Bytes(), nil
}

// requestPhaseBuckets are the buckets of the request-phase histograms (queue, prefill,
// decode, inference): vLLM's request-latency buckets, preceded by finer ones for the
// millisecond phases of a fast or time-scaled engine.
var requestPhaseBuckets = []float64{
	0.001, 0.005, 0.01, 0.02, 0.05, 0.1,
	0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680,
}

func newEngineMetrics(cfg Config) *engineMetrics {
	reg := prometheus.NewRegistry()
	model := prometheus.Labels{"model_name": cfg.Model}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: model})
		reg.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: model})
		reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: model, Buckets: buckets})
		reg.MustRegister(h)
		return h
	}
	m := &engineMetrics{
		registry:         reg,
		running:          gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:          gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		kvUsage:          gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		prefixQueries:    counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		prefixHits:       counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		promptTokens:     counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
		ttft: histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
			[]float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}),
		timePerOutputTok: histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
			[]float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}),
		e2eLatency: histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
			[]float64{0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60}),
		queueTime: histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
			requestPhaseBuckets),
		prefillTime: histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
			requestPhaseBuckets),
		decodeTime: histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
			requestPhaseBuckets),
		inferenceTime: histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
			requestPhaseBuckets),
		loraInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vllm:lora_requests_info", Help: "Running stats on lora requests.",
		}, []string{"running_lora_adapters", "waiting_lora_adapters", "max_lora"}),
		requestSuccess: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: model,
		}, []string{"finished_reason"}),
		maxLoRAs: strconv.Itoa(cfg.MaxLoRAs),
	}
	cacheInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig.",
	}, []string{"block_size", "num_gpu_blocks"})
	cacheInfo.WithLabelValues(strconv.Itoa(cfg.BlockSize), strconv.Itoa(cfg.KVBlocks)).Set(1)
	reg.MustRegister(m.loraInfo, m.requestSuccess, cacheInfo)
	m.setLoRAInfo(nil, nil, 0)
	return m
}

// setLoRAInfo replaces the single vllm:lora_requests_info series; its value is the update
// time in seconds since the epoch, as vLLM reports it.
func (m *engineMetrics) setLoRAInfo(running, waiting []string, unixSeconds float64) {
	m.loraInfo.Reset()
	m.loraInfo.WithLabelValues(strings.Join(running, ","), strings.Join(waiting, ","), m.maxLoRAs).Set(unixSeconds)
}
