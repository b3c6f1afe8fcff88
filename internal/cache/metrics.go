package cache

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// metricNames lists, per engine, the metric families mapped to endpoint.Metrics. Where a
// field has several names, the first family present wins (newer names first).
type metricNames struct {
	running, waiting, kvCacheUsage []string
	prefixQueries, prefixHits      []string
	prefixHitRate                  []string
	loraInfo, cacheConfig          []string
	// kvTokens is a gauge of the KV cache's size in tokens, for engines that report it
	// so rather than in cacheConfig's blocks.
	kvTokens                       []string
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
		kvTokens:         []string{"sglang:max_total_num_tokens"},
		prefixHitRate:    []string{"sglang:cache_hit_rate"},
		ttft:             []string{"sglang:time_to_first_token_seconds"},
		tpot:             []string{"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"},
		e2e:              []string{"sglang:e2e_request_latency_seconds"},
		queue:            []string{"sglang:queue_time_seconds"}, // SGLang has no prefill, decode or inference histograms
		promptTokens:     []string{"sglang:prompt_tokens_total"},
		generationTokens: []string{"sglang:generation_tokens_total"},
	},
}

// lists returns every candidate list of n.
func (n metricNames) lists() [][]string {
	return [][]string{
		n.running, n.waiting, n.kvCacheUsage, n.prefixQueries, n.prefixHits, n.prefixHitRate,
		n.loraInfo, n.cacheConfig, n.kvTokens, n.ttft, n.tpot, n.e2e, n.queue, n.prefill, n.decode,
		n.inference, n.promptTokens, n.generationTokens,
	}
}

// metricsSchemas holds engineMetricNames compiled, per engine.
var metricsSchemas = func() map[endpoint.Engine]*metricsSchema {
	schemas := make(map[endpoint.Engine]*metricsSchema, len(engineMetricNames))
	for engine, names := range engineMetricNames {
		schemas[engine] = newMetricsSchema(names)
	}
	return schemas
}()

// ParseMetrics reads Prometheus text exposition (format 0.0.4) from an engine of the
// given type and maps it to a metrics snapshot stamped with scrapedAt. Series of one
// family (for example one per data-parallel engine) are summed, except ratios, which
// are averaged. Families the engine does not export leave their fields zero.
//
// ParseMetrics reads r to its end (the caller bounds its size), then the text in one
// pass. It parses the HELP, TYPE and sample lines of the families it maps, and of
// their histograms' _count, _sum and _bucket series, and assigns series to families
// and reads values as the text format's reference parser, expfmt.TextParser, does:
// the result is that of mapping that parser's output. Those lines must be well formed:
// a metric name, optionally quoted; an optional label set; a float value (NaN and
// ±Inf included); an optional integer timestamp. Every other line is only checked to
// be blank or to start like a sample (a metric-name character, '"' or '{') or a
// comment ('#'), so, unlike expfmt, a malformed line of a family the mapping does not
// read does not fail the parse. Lines end in LF or CRLF, and a last line that is not
// blank must end too. Anything else, such as an HTML error page, is an error.
func ParseMetrics(engine endpoint.Engine, r io.Reader, scrapedAt time.Time) (endpoint.Metrics, error) {
	schema, ok := metricsSchemas[engine]
	if !ok {
		return endpoint.Metrics{}, fmt.Errorf("parse metrics: unknown engine %q", engine)
	}
	p := metricsParsers.Get().(*metricsParser)
	defer p.release()
	p.body.Reset()
	if _, err := p.body.ReadFrom(r); err != nil {
		return endpoint.Metrics{}, fmt.Errorf("parse metrics: %w", err)
	}
	p.reset(schema)
	if err := p.parse(p.body.Bytes()); err != nil {
		return endpoint.Metrics{}, fmt.Errorf("parse metrics: %w", err)
	}
	return p.metrics(scrapedAt), nil
}

// metrics maps the families p read to a snapshot.
func (p *metricsParser) metrics(scrapedAt time.Time) endpoint.Metrics {
	names := p.schema.names
	m := endpoint.Metrics{
		Running:            p.find(names.running).total(),
		Waiting:            p.find(names.waiting).total(),
		KVCacheUsage:       p.find(names.kvCacheUsage).mean(),
		PrefixCacheQueries: p.find(names.prefixQueries).total(),
		PrefixCacheHits:    p.find(names.prefixHits).total(),
		PrefixCacheHitRate: p.find(names.prefixHitRate).mean(),
		TTFT:               p.histogram(names.ttft),
		TPOT:               p.histogram(names.tpot),
		E2E:                p.histogram(names.e2e),
		QueueTime:          p.histogram(names.queue),
		PrefillTime:        p.histogram(names.prefill),
		DecodeTime:         p.histogram(names.decode),
		InferenceTime:      p.histogram(names.inference),
		PromptTokens:       p.find(names.promptTokens).total(),
		GenerationTokens:   p.find(names.generationTokens).total(),
		ScrapedAt:          scrapedAt,
	}
	if m.PrefixCacheHitRate == 0 && m.PrefixCacheQueries > 0 {
		m.PrefixCacheHitRate = m.PrefixCacheHits / m.PrefixCacheQueries
	}
	if f := p.find(names.loraInfo); f != nil {
		m.LoRA = f.lora.state()
	}
	if f := p.find(names.cacheConfig); f != nil {
		m.BlockSize, m.NumGPUBlocks = f.info.blockSize, f.info.numGPUBlocks
	}
	if f := p.find(names.kvTokens); f != nil && m.NumGPUBlocks == 0 {
		// SGLang's radix cache holds tokens, not blocks: a block of one token each.
		m.BlockSize, m.NumGPUBlocks = 1, int(f.total())
	}
	return m
}

// find returns the first family of candidates that has samples, or nil.
func (p *metricsParser) find(candidates []string) *familyState {
	for _, name := range candidates {
		if f := &p.fams[p.schema.series[name].family]; f.samples > 0 {
			return f
		}
	}
	return nil
}

// total adds the values of the samples of f; 0 when f is nil or not a counter, gauge
// or untyped family.
func (f *familyState) total() float64 {
	if f == nil {
		return 0
	}
	return f.sum
}

// mean averages the values of the samples of f; 0 when f is nil, and for a summary or
// histogram family.
func (f *familyState) mean() float64 {
	if f == nil {
		return 0
	}
	return f.sum / float64(f.samples)
}

// histogram adds the count and sum of all series of the first family of candidates
// that has samples; zero unless that family is a histogram.
func (p *metricsParser) histogram(candidates []string) endpoint.Histogram {
	var h endpoint.Histogram
	f := p.find(candidates)
	if f == nil || f.typ != typeHistogram {
		return h
	}
	for i := range p.groups {
		if g := &p.groups[i]; g.family == f.id {
			h.Count += g.sampleCount()
			h.Sum += g.sum
		}
	}
	return h
}

// loraFold reads vllm:lora_requests_info one series at a time. Engines export one
// series per label set, with the time of its last update as the value, and keep old
// series, so the newest series wins. Several series may carry the newest value (some
// engines write whole seconds, so updates within one second tie); then the state is
// their union: the running adapters of all of them (in order of first appearance),
// likewise the waiting ones, and the largest max_lora. Erring towards "running" keeps
// an adapter the engine may well be running visible rather than dropping it on a coin
// toss.
type loraFold struct {
	found   bool
	newest  float64
	maxLoRA int
	// names holds the adapter names of running and waiting back to back.
	names            []byte
	running, waiting []span
}

// span is the range [start, end) of a loraFold's names.
type span struct{ start, end int }

// reset returns an empty fold that keeps f's buffers.
func (f *loraFold) reset() loraFold {
	return loraFold{names: f.names[:0], running: f.running[:0], waiting: f.waiting[:0]}
}

// add folds in a series of value v and the (unescaped) values of its
// running_lora_adapters, waiting_lora_adapters and max_lora labels.
func (f *loraFold) add(v float64, running, waiting, maxLoRA []byte) {
	if f.found && v < f.newest {
		return
	}
	if !f.found || v > f.newest {
		*f = f.reset()
		f.found, f.newest = true, v
	}
	f.running = f.appendNew(f.running, running)
	f.waiting = f.appendNew(f.waiting, waiting)
	f.maxLoRA = max(f.maxLoRA, atoi(maxLoRA))
}

// appendNew appends to list the items of the comma-separated list that it does not
// hold yet, dropping empty items.
func (f *loraFold) appendNew(list []span, items []byte) []span {
	for len(items) > 0 {
		item := items
		if i := bytes.IndexByte(items, ','); i >= 0 {
			item, items = items[:i], items[i+1:]
		} else {
			items = nil
		}
		if item = bytes.TrimSpace(item); len(item) == 0 || f.holds(list, item) {
			continue
		}
		f.names = append(f.names, item...)
		list = append(list, span{len(f.names) - len(item), len(f.names)})
	}
	return list
}

// holds reports whether list holds item.
func (f *loraFold) holds(list []span, item []byte) bool {
	for _, s := range list {
		if bytes.Equal(f.names[s.start:s.end], item) {
			return true
		}
	}
	return false
}

// state returns the folded state.
func (f *loraFold) state() endpoint.LoRAState {
	names := string(f.names)
	return endpoint.LoRAState{Running: spans(names, f.running), Waiting: spans(names, f.waiting), MaxLoRA: f.maxLoRA}
}

// spans returns the strings of names that list ranges over; nil for an empty list.
func spans(names string, list []span) []string {
	if len(list) == 0 {
		return nil
	}
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = names[s.start:s.end]
	}
	return out
}

// infoFold reads an info series (vllm:cache_config_info) one series at a time and
// keeps the labels of the one with the highest value (engines export the update time
// as the value; the first of equal values).
type infoFold struct {
	found                   bool
	newest                  float64
	blockSize, numGPUBlocks int
}

// add folds in a series of value v and the values, as written, of its block_size and
// num_gpu_blocks labels.
func (f *infoFold) add(v float64, blockSize, numGPUBlocks []byte) {
	if f.found && !(v > f.newest) {
		return
	}
	*f = infoFold{found: true, newest: v, blockSize: atoi(blockSize), numGPUBlocks: atoi(numGPUBlocks)}
}
