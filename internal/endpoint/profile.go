package endpoint

// Profile is what an engine's successive metrics snapshots tell about its speed and its
// scheduler: learnt from the differences between one scrape and the next, weighted
// towards the last several seconds, so it follows the engine's recent behaviour rather
// than its lifetime means. A zero field is unknown. Build it with [Profile.Next]; the
// cache carries it from each snapshot to the next.
type Profile struct {
	// Epoch counts the engine restarts seen: it grows whenever a cumulative counter of the
	// engine went back. Anything learnt about the engine's caches in an earlier epoch is
	// void.
	Epoch uint64
	// Slots is the number of running requests at which the engine was last seen queueing
	// (requests waiting while this many ran); until it queued once, the slots its pod
	// declares (Endpoint.Slots), which the scraper starts the profile from; 0 when neither
	// is known.
	Slots float64
	// PrefillPerToken is the recent prefill time per prompt token not in the engine's
	// prefix cache, in seconds: prefill time over uncached tokens, summed over the recent
	// intervals. A prefill's fixed part is folded into it.
	PrefillPerToken float64
	// Service is the recent mean time a request runs (prefill and decode), in seconds:
	// how long it holds one of the engine's slots.
	Service float64
	// DecodePerToken is the recent mean time per output token, in seconds.
	DecodePerToken float64
	// Decode is the recent mean time a request decodes, from its first token to its
	// last, in seconds: how long it keeps its slot once its answer began. It is held to
	// float32 precision, as a hot cell holds it.
	Decode float64
	// PrefilledTokens and Requests are the evidence behind the rates: the uncached prompt
	// tokens prefilled and the requests finished recently, each weighted as it fades.
	PrefilledTokens, Requests float64
	// Throughput is the engine's prompt plus generation tokens per second over the last
	// scrape interval, held to float32 precision (as a hot cell holds it). It is known
	// (ThroughputKnown) from the second scrape of an epoch on.
	Throughput      float64
	ThroughputKnown bool

	// The decaying sums the rates are ratios of, with PrefilledTokens and Requests.
	prefillSeconds, serviceSeconds float64
	decode, decodeTime             decayingMean
}

// profileDecay is the weight the sums keep from one scrape to the next: at the default
// 100 ms scrape interval, observations fade with a time constant of about 5 s. Sums of
// that many intervals keep the ratios steady although an engine counts a request's
// prompt tokens when its prefill starts and its prefill time when the prefill ends,
// often in different intervals.
const profileDecay = 0.98

// Evidence a Profile needs before its rates count as learnt (decayed sums).
const (
	// minUncachedTokens is the least prompt tokens prefilled for a prefill rate.
	minUncachedTokens = 4096
	// minRequests is the least requests finished for a service time.
	minRequests = 4
)

// Learnt reports whether the profile has seen enough work for its prefill rate and
// service time to be trusted: a few thousand tokens prefilled and a few requests run, so
// that neither a lone probe nor the first request of a cold engine sets them.
func (p *Profile) Learnt() bool {
	return p.PrefilledTokens >= minUncachedTokens && p.Requests >= minRequests &&
		p.PrefillPerToken > 0 && p.Service > 0
}

// Next returns the profile that follows p once the engine's snapshot cur follows prev
// (nil before the first scrape). Cumulative counters that went back mean the engine
// restarted: the epoch grows and the interval teaches nothing else.
func (p Profile) Next(prev, cur *Metrics) Profile {
	if cur.Waiting > 0 && cur.Running > 0 {
		p.Slots = cur.Running
	} else if cur.Running > p.Slots && p.Slots > 0 {
		p.Slots = cur.Running
	}
	if prev == nil {
		return p
	}
	if restarted(prev, cur) {
		p.Epoch++
		p.Throughput, p.ThroughputKnown = 0, false
		return p
	}
	if seconds := cur.ScrapedAt.Sub(prev.ScrapedAt).Seconds(); seconds > 0 {
		tokens := (cur.PromptTokens + cur.GenerationTokens) - (prev.PromptTokens + prev.GenerationTokens)
		p.Throughput, p.ThroughputKnown = float64(float32(tokens/seconds)), true
	}
	seconds, requests := serviceInterval(prev, cur)
	p.serviceSeconds = profileDecay*p.serviceSeconds + seconds
	p.Requests = profileDecay*p.Requests + requests
	if p.Requests > 0 {
		p.Service = p.serviceSeconds / p.Requests
	}
	tpot := cur.TPOT.minus(prev.TPOT)
	p.decode = p.decode.add(tpot.Sum, tpot.Count)
	p.DecodePerToken = p.decode.mean()
	p.decodeTime = p.decodeTime.add(decodeInterval(prev, cur))
	p.Decode = float64(float32(p.decodeTime.mean()))
	uncached := (cur.PromptTokens - prev.PromptTokens) - (cur.PrefixCacheHits - prev.PrefixCacheHits)
	p.prefillSeconds = profileDecay*p.prefillSeconds + prefillSeconds(prev, cur)
	p.PrefilledTokens = profileDecay*p.PrefilledTokens + max(uncached, 0)
	if p.PrefilledTokens >= 1 {
		p.PrefillPerToken = p.prefillSeconds / p.PrefilledTokens
	}
	return p
}

// serviceInterval returns the time requests finished between prev and cur spent running
// and how many they were: from the inference-time histogram where the engine exports
// one, otherwise end-to-end latency less queue time.
func serviceInterval(prev, cur *Metrics) (seconds, requests float64) {
	if cur.InferenceTime.Count > 0 {
		d := cur.InferenceTime.minus(prev.InferenceTime)
		return d.Sum, float64(d.Count)
	}
	d := cur.E2E.minus(prev.E2E)
	return max(d.Sum-cur.QueueTime.minus(prev.QueueTime).Sum, 0), float64(d.Count)
}

// decodeInterval returns the time requests finished between prev and cur spent decoding
// and how many they were: from the decode-time histogram where the engine exports one,
// otherwise end-to-end latency less time to first token.
func decodeInterval(prev, cur *Metrics) (seconds float64, requests uint64) {
	if cur.DecodeTime.Count > 0 {
		d := cur.DecodeTime.minus(prev.DecodeTime)
		return d.Sum, d.Count
	}
	d := cur.E2E.minus(prev.E2E)
	return max(d.Sum-cur.TTFT.minus(prev.TTFT).Sum, 0), d.Count
}

// prefillSeconds returns the prefill time the engine spent between prev and cur: from
// the prefill-time histogram where the engine exports one, otherwise time to first
// token less queue time.
func prefillSeconds(prev, cur *Metrics) float64 {
	if cur.PrefillTime.Count > 0 {
		return cur.PrefillTime.minus(prev.PrefillTime).Sum
	}
	return max(cur.TTFT.minus(prev.TTFT).Sum-cur.QueueTime.minus(prev.QueueTime).Sum, 0)
}

// restarted reports whether a cumulative counter of the engine went back between prev
// and cur.
func restarted(prev, cur *Metrics) bool {
	return cur.PromptTokens < prev.PromptTokens || cur.GenerationTokens < prev.GenerationTokens ||
		cur.PrefixCacheQueries < prev.PrefixCacheQueries || cur.E2E.Count < prev.E2E.Count ||
		cur.TTFT.Count < prev.TTFT.Count
}

// minus returns the observations of h made since earlier.
func (h Histogram) minus(earlier Histogram) Histogram {
	if h.Count < earlier.Count {
		return Histogram{}
	}
	return Histogram{Count: h.Count - earlier.Count, Sum: h.Sum - earlier.Sum}
}

// decayingMean is the mean of observations whose weight decays by profileDecay at every
// scrape.
type decayingMean struct{ sum, count float64 }

// add returns m decayed once, with count observations summing to sum added.
func (m decayingMean) add(sum float64, count uint64) decayingMean {
	return decayingMean{sum: profileDecay*m.sum + sum, count: profileDecay*m.count + float64(count)}
}

// mean returns the weighted mean, 0 while nothing was observed.
func (m decayingMean) mean() float64 {
	if m.count < 1e-9 {
		return 0
	}
	return m.sum / m.count
}
