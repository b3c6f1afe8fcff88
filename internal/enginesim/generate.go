package enginesim

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"
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

// PrefillTime is the modelled time to first token, before time scaling, for a prompt with
// uncached tokens not in the KV cache, prefilled in a batch of batch running requests.
func (c *Config) PrefillTime(uncached, batch int) time.Duration {
	slowdown := 1 + c.PrefillBatchFactor*float64(batch-1)
	return c.PrefillOverhead + time.Duration(float64(uncached)*float64(c.PrefillPerToken)*slowdown)
}

// prefill waits for a slot for g with room for outputTokens more tokens, then prefills the
// uncached part of its prompt, recording the prompt and prefix-cache metrics. Unless it
// fails, the caller must finish the returned sequence.
func (e *Engine) prefill(ctx context.Context, g generation, outputTokens int) (*sequence, generationResult, error) {
	res := generationResult{promptTokens: CountTokens(g.prompt)}
	seq, err := e.admit(ctx, g.prompt, outputTokens, g.adapter)
	if err != nil {
		return nil, res, err
	}
	res.cachedTokens = min(seq.cachedTok, res.promptTokens)
	e.metrics.prefixQueries.Add(float64(res.promptTokens))
	e.metrics.prefixHits.Add(float64(res.cachedTokens))
	e.metrics.promptTokens.Add(float64(res.promptTokens))
	e.metrics.changed()
	if err := e.sleep(ctx, e.cfg.PrefillTime(res.promptTokens-res.cachedTokens, seq.batch)); err != nil {
		e.finish(seq)
		return nil, res, err
	}
	return seq, res, nil
}

// succeeded records a request that arrived at start, ran as seq, produced its first token
// at first and its last at last, and finished for reason. Like vLLM V1 it splits the
// request into phases: queued (joined the waiting queue) to scheduled is the queue time,
// scheduled to first token the prefill time, first to last token the decode time, and
// scheduled to last token the inference time.
func (e *Engine) succeeded(start time.Time, seq *sequence, first, last time.Time, reason string) {
	e.metrics.e2eLatency.Observe(time.Since(start).Seconds())
	e.metrics.queueTime.Observe(seq.scheduled.Sub(seq.queued).Seconds())
	e.metrics.prefillTime.Observe(first.Sub(seq.scheduled).Seconds())
	e.metrics.decodeTime.Observe(last.Sub(first).Seconds())
	e.metrics.inferenceTime.Observe(last.Sub(seq.scheduled).Seconds())
	e.metrics.requestSuccess.WithLabelValues(reason).Inc()
	e.metrics.changed()
}

// generate runs a request through the engine model: it waits for a slot, prefills the
// uncached part of the prompt, then emits one token at a time through emit, which may stop
// the generation by returning an error. Metrics are recorded as the request progresses.
func (e *Engine) generate(ctx context.Context, g generation, emit func(token string) error) (generationResult, error) {
	start := time.Now()
	outputTokens := e.outputLength(g.maxTokens)
	seq, res, err := e.prefill(ctx, g, outputTokens)
	if err != nil {
		return res, err
	}
	defer e.finish(seq)
	res.finishReason = "length"
	if g.maxTokens <= 0 {
		res.finishReason = "stop"
	}
	// TTFT counts from the request's arrival, queueing included, as vLLM's does.
	first := time.Now()
	last := first
	e.metrics.ttft.Observe(first.Sub(start).Seconds())
	e.metrics.changed()
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
		e.metrics.changed()
		res.completionTokens++
		if err := emit(e.word()); err != nil {
			return res, err
		}
	}
	e.succeeded(start, seq, first, last, res.finishReason)
	return res, nil
}

// encode runs prompt-only requests (embeddings, scores) through the engine model, all at
// once as vLLM schedules a batch of prompts: each waits for a slot, is prefilled and counts
// as a request finished with reason "stop" whose running phase is all prefill (its decode
// time is 0). It returns each prompt's token count.
func (e *Engine) encode(ctx context.Context, prompts []string, adapter string) ([]int, error) {
	tokens := make([]int, len(prompts))
	g, ctx := errgroup.WithContext(ctx)
	for i, prompt := range prompts {
		g.Go(func() error {
			start := time.Now()
			seq, res, err := e.prefill(ctx, generation{prompt: prompt, adapter: adapter}, 0)
			if err != nil {
				return err
			}
			done := time.Now()
			e.finish(seq)
			e.succeeded(start, seq, done, done, "stop")
			tokens[i] = res.promptTokens
			return nil
		})
	}
	return tokens, g.Wait()
}

// totalTokens sums token counts.
func totalTokens(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
