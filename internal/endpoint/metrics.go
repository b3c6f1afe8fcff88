package endpoint

import "time"

// Histogram summarises a Prometheus histogram by its cumulative count and sum.
type Histogram struct {
	// Count is the number of observations.
	Count uint64
	// Sum is the sum of all observations, in the histogram's unit.
	Sum float64
}

// Mean returns Sum/Count, or 0 when there are no observations.
func (h Histogram) Mean() float64 {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / float64(h.Count)
}

// LoRAState is the engine's view of LoRA adapter scheduling.
type LoRAState struct {
	// Running are the adapters with requests currently running.
	Running []string
	// Waiting are the adapters with requests waiting to be scheduled.
	Waiting []string
	// MaxLoRA is the number of adapters the engine can hold at once; 0 when unknown.
	MaxLoRA int
}

// Metrics is one scrape of an engine's /metrics endpoint mapped to engine-neutral names.
// Gauges hold the last value; counters and histograms are cumulative since engine start.
type Metrics struct {
	// The fields every routing decision reads come first, in as few cache lines as they
	// fit: a decision over a thousand endpoints reads them a thousand times.

	// Running is the number of requests being processed.
	Running float64
	// Waiting is the number of requests queued in the engine.
	Waiting float64
	// ScrapedAt is when the scrape completed.
	ScrapedAt time.Time
	// LocalInFlight is the number of requests the scraping process had in flight to the
	// endpoint when the scrape completed; the requests it sent since are not in Running or
	// Waiting yet.
	LocalInFlight int64
	// Profile is what this snapshot and the ones before it tell about the engine's speed
	// and scheduler (see Profile).
	Profile Profile
	// KVCacheUsage is the fraction of KV-cache blocks in use, in [0,1].
	KVCacheUsage float64
	// PrefixCacheQueries is the cumulative number of prefix-cache lookups (tokens).
	PrefixCacheQueries float64
	// PrefixCacheHits is the cumulative number of prefix-cache hits (tokens).
	PrefixCacheHits float64
	// PrefixCacheHitRate is the hit ratio in [0,1]: reported directly by engines that
	// export one, otherwise derived from PrefixCacheHits/PrefixCacheQueries.
	PrefixCacheHitRate float64
	// LoRA is the adapter scheduling state; zero when the engine does not report it.
	LoRA LoRAState
	// BlockSize is the KV-cache block size in tokens; 0 when unknown. SGLang, whose cache
	// holds tokens (sglang:max_total_num_tokens), counts as blocks of one token.
	BlockSize int
	// NumGPUBlocks is the number of KV-cache blocks on the GPU; 0 when unknown.
	NumGPUBlocks int
	// TTFT is the time-to-first-token histogram, in seconds.
	TTFT Histogram
	// TPOT is the time-per-output-token histogram, in seconds.
	TPOT Histogram
	// E2E is the end-to-end request latency histogram, in seconds.
	E2E Histogram
	// QueueTime is the histogram of the time requests spent waiting in the engine before
	// they ran (vLLM's WAITING phase), in seconds.
	QueueTime Histogram
	// PrefillTime is the histogram of the time requests spent in prefill, in seconds.
	PrefillTime Histogram
	// DecodeTime is the histogram of the time requests spent decoding, in seconds.
	DecodeTime Histogram
	// InferenceTime is the histogram of the time requests spent running (prefill and
	// decode: vLLM's RUNNING phase), in seconds.
	InferenceTime Histogram
	// PromptTokens is the cumulative number of prompt tokens processed.
	PromptTokens float64
	// GenerationTokens is the cumulative number of tokens generated.
	GenerationTokens float64
}

// Stale reports whether the snapshot is older than maxAge at now. Routers treat a stale
// snapshot as unknown.
func (m *Metrics) Stale(now time.Time, maxAge time.Duration) bool {
	return now.Sub(m.ScrapedAt) > maxAge
}
