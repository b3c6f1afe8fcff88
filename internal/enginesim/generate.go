package enginesim

import (
	"context"
	"time"
)

// generation describes one request to the engine model.
type generation struct {
	prompt    string
	maxTokens int
	adapter   string
}

// generationResult summarises a finished generation.
type generationResult struct {
	promptTokens     int
	completionTokens int
	cachedTokens     int
	finishReason     string
}

// prefillTime is the modelled time to first token, before time scaling, for a prompt with
// uncached tokens not in the KV cache, prefilled in a batch of batch running requests.
func (e *Engine) prefillTime(uncached, batch int) time.Duration {
	slowdown := 1 + e.cfg.PrefillBatchFactor*float64(batch-1)
	return e.cfg.PrefillOverhead + time.Duration(float64(uncached)*float64(e.cfg.PrefillPerToken)*slowdown)
}

// generate runs a request through the engine model: it waits for a slot, prefills the
// uncached part of the prompt, then emits one token at a time through emit, which may stop
// the generation by returning an error. Metrics are recorded as the request progresses.
func (e *Engine) generate(ctx context.Context, g generation, emit func(token string) error) (generationResult, error) {
	start := time.Now()
	res := generationResult{promptTokens: CountTokens(g.prompt), finishReason: "length"}
	if g.maxTokens <= 0 {
		res.finishReason = "stop"
	}
	outputTokens := e.outputLength(g.maxTokens)
	seq, err := e.admit(ctx, g.prompt, outputTokens, g.adapter)
	if err != nil {
		return res, err
	}
	defer e.finish(seq)
	res.cachedTokens = min(seq.cachedTok, res.promptTokens)
	e.metrics.prefixQueries.Add(float64(res.promptTokens))
	e.metrics.prefixHits.Add(float64(res.cachedTokens))
	e.metrics.promptTokens.Add(float64(res.promptTokens))

	if err := e.sleep(ctx, e.prefillTime(res.promptTokens-res.cachedTokens, seq.batch)); err != nil {
		return res, err
	}
	last := time.Now()
	e.metrics.ttft.Observe(last.Sub(start).Seconds())
	for i := range outputTokens {
		if i > 0 {
			itl := time.Duration(float64(e.cfg.InterTokenLatency) * (1 + e.cfg.DecodeBatchFactor*float64(e.batchSize()-1)))
			if err := e.sleep(ctx, itl); err != nil {
				return res, err
			}
			now := time.Now()
			e.metrics.timePerOutputTok.Observe(now.Sub(last).Seconds())
			last = now
		}
		e.metrics.generationTokens.Inc()
		res.completionTokens++
		if err := emit(e.word()); err != nil {
			return res, err
		}
	}
	e.metrics.e2eLatency.Observe(time.Since(start).Seconds())
	e.metrics.requestSuccess.WithLabelValues(res.finishReason).Inc()
	return res, nil
}
