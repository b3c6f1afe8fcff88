package cache

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// metricNames lists, per engine, the metric families mapped to endpoint.Metrics. Where a
// field has several names, the first family present wins (newer names first).
type metricNames struct {
	running, waiting, kvCacheUsage []string
	prefixQueries, prefixHits      []string
	prefixHitRate                  []string
	loraInfo, cacheConfig          []string
	ttft, tpot, e2e                []string
	queue, prefill, decode         []string
	inference                      []string
	promptTokens, generationTokens []string
}

var engineMetricNames = map[endpoint.Engine]metricNames{
	endpoint.EngineVLLM: {
		running:          []string{"vllm:num_requests_running"},
		waiting:          []string{"vllm:num_requests_waiting"},
		kvCacheUsage:     []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		prefixQueries:    []string{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"},
		prefixHits:       []string{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"},
		loraInfo:         []string{"vllm:lora_requests_info"},
		cacheConfig:      []string{"vllm:cache_config_info"},
		ttft:             []string{"vllm:time_to_first_token_seconds"},
		tpot:             []string{"vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds"},
		e2e:              []string{"vllm:e2e_request_latency_seconds"},
		queue:            []string{"vllm:request_queue_time_seconds"},
		prefill:          []string{"vllm:request_prefill_time_seconds"},
		decode:           []string{"vllm:request_decode_time_seconds"},
		inference:        []string{"vllm:request_inference_time_seconds"},
		promptTokens:     []string{"vllm:prompt_tokens_total"},
		generationTokens: []string{"vllm:generation_tokens_total"},
	},
	endpoint.EngineSGLang: {
		running:          []string{"sglang:num_running_reqs"},
		waiting:          []string{"sglang:num_queue_reqs"},
		kvCacheUsage:     []string{"sglang:token_usage"},
		prefixHitRate:    []string{"sglang:cache_hit_rate"},
		ttft:             []string{"sglang:time_to_first_token_seconds"},
		tpot:             []string{"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"},
		e2e:              []string{"sglang:e2e_request_latency_seconds"},
		queue:            []string{"sglang:queue_time_seconds"}, // SGLang has no prefill, decode or inference histograms
		promptTokens:     []string{"sglang:prompt_tokens_total"},
		generationTokens: []string{"sglang:generation_tokens_total"},
	},
}

// ParseMetrics reads Prometheus text exposition from an engine of the given type and maps
// it to a metrics snapshot stamped with scrapedAt. Series of one family (for example one
// per data-parallel engine) are summed, except ratios, which are averaged. Families the
// engine does not export leave their fields zero.
func ParseMetrics(engine endpoint.Engine, r io.Reader, scrapedAt time.Time) (endpoint.Metrics, error) {
	names, ok := engineMetricNames[engine]
	if !ok {
		return endpoint.Metrics{}, fmt.Errorf("parse metrics: unknown engine %q", engine)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return endpoint.Metrics{}, fmt.Errorf("parse metrics: %w", err)
	}
	find := func(candidates []string) *dto.MetricFamily {
		for _, n := range candidates {
			if f, ok := families[n]; ok {
				return f
			}
		}
		return nil
	}

	m := endpoint.Metrics{
		Running:            sum(find(names.running)),
		Waiting:            sum(find(names.waiting)),
		KVCacheUsage:       mean(find(names.kvCacheUsage)),
		PrefixCacheQueries: sum(find(names.prefixQueries)),
		PrefixCacheHits:    sum(find(names.prefixHits)),
		PrefixCacheHitRate: mean(find(names.prefixHitRate)),
		TTFT:               histogram(find(names.ttft)),
		TPOT:               histogram(find(names.tpot)),
		E2E:                histogram(find(names.e2e)),
		QueueTime:          histogram(find(names.queue)),
		PrefillTime:        histogram(find(names.prefill)),
		DecodeTime:         histogram(find(names.decode)),
		InferenceTime:      histogram(find(names.inference)),
		PromptTokens:       sum(find(names.promptTokens)),
		GenerationTokens:   sum(find(names.generationTokens)),
		ScrapedAt:          scrapedAt,
	}
	if m.PrefixCacheHitRate == 0 && m.PrefixCacheQueries > 0 {
		m.PrefixCacheHitRate = m.PrefixCacheHits / m.PrefixCacheQueries
	}
	m.LoRA = loraState(find(names.loraInfo))
	if labels := latestInfo(find(names.cacheConfig)); labels != nil {
		m.BlockSize = atoi(labels["block_size"])
		m.NumGPUBlocks = atoi(labels["num_gpu_blocks"])
	}
	return m, nil
}

// value returns the sample value of a gauge, counter or untyped metric.
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// sum adds the values of all series in f; 0 when f is nil.
func sum(f *dto.MetricFamily) float64 {
	var total float64
	for _, m := range f.GetMetric() {
		total += value(m)
	}
	return total
}

// mean averages the values of all series in f; 0 when f is nil or empty.
func mean(f *dto.MetricFamily) float64 {
	if len(f.GetMetric()) == 0 {
		return 0
	}
	return sum(f) / float64(len(f.GetMetric()))
}

// histogram adds the count and sum of all histogram series in f.
func histogram(f *dto.MetricFamily) endpoint.Histogram {
	var h endpoint.Histogram
	for _, m := range f.GetMetric() {
		h.Count += m.GetHistogram().GetSampleCount()
		h.Sum += m.GetHistogram().GetSampleSum()
	}
	return h
}

// loraState reads vllm:lora_requests_info. Engines export one series per label set, with
// the time of its last update as the value, and keep old series, so the newest series
// wins. Several series may carry the newest value (some engines write whole seconds, so
// updates within one second tie); then the state is their union: the running adapters of
// all of them (in order of first appearance), likewise the waiting ones, and the largest
// max_lora. Erring towards "running" keeps an adapter the engine may well be running
// visible rather than dropping it on a coin toss. Zero when f has no series.
func loraState(f *dto.MetricFamily) endpoint.LoRAState {
	var (
		state  endpoint.LoRAState
		newest float64
		found  bool
	)
	for _, m := range f.GetMetric() {
		v := value(m)
		if found && v < newest {
			continue
		}
		if !found || v > newest {
			state, newest, found = endpoint.LoRAState{}, v, true
		}
		labels := make(map[string]string, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		state.Running = appendNew(state.Running, splitList(labels["running_lora_adapters"]))
		state.Waiting = appendNew(state.Waiting, splitList(labels["waiting_lora_adapters"]))
		state.MaxLoRA = max(state.MaxLoRA, atoi(labels["max_lora"]))
	}
	return state
}

// appendNew appends to list the items it does not hold yet.
func appendNew(list, items []string) []string {
	for _, item := range items {
		if !slices.Contains(list, item) {
			list = append(list, item)
		}
	}
	return list
}

// latestInfo returns the labels of the info series with the highest value (engines
// export the update time as the value; the first of equal values), or nil when f has no
// series.
func latestInfo(f *dto.MetricFamily) map[string]string {
	var best *dto.Metric
	for _, m := range f.GetMetric() {
		if best == nil || value(m) > value(best) {
			best = m
		}
	}
	if best == nil {
		return nil
	}
	labels := make(map[string]string, len(best.GetLabel()))
	for _, l := range best.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

// splitList splits a comma-separated label value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// atoi parses a decimal label value, returning 0 for anything else (such as "None").
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}
