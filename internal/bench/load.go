package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// PointResult is the outcome of one workload × strategy × rate load point.
type PointResult struct {
	Workload string  `json:"workload"`
	Strategy string  `json:"strategy"`
	Rate     float64 `json:"rate_rps"`
	// Seed is the run's seed (one of Settings.Seeds); the point's arrivals and prompts are
	// drawn from a seed derived from it, the workload and the rate.
	Seed uint64 `json:"seed"`
	// Duration is the arrival window in seconds; requests still running at its end are
	// waited for.
	Duration  float64        `json:"duration_s"`
	Sent      int            `json:"sent"`
	Completed int            `json:"completed"`
	Failed    int            `json:"failed"`
	Errors    map[string]int `json:"errors,omitempty"`
	// TTFT is the time from sending a streaming request to its first content chunk.
	TTFT Summary `json:"ttft"`
	// E2E is the time from sending a request to the end of its stream.
	E2E Summary `json:"e2e"`
	// Throughput is completed requests per second from the first send to the last end.
	Throughput float64 `json:"throughput_rps"`
	// TokenThroughput is output tokens per second over the same span: the final usage
	// chunk's completion_tokens where the stream had one, else the content chunks.
	TokenThroughput float64 `json:"output_tokens_per_s"`
	// UsageChunks is the number of completed streams that ended with a usage chunk
	// (requested with stream_options.include_usage).
	UsageChunks int `json:"usage_chunks,omitempty"`
	// HitRate is the engines' prefix-cache hits / queries (tokens) during the point, from
	// vllm:prefix_cache_hits_total and vllm:prefix_cache_queries_total.
	HitRate       float64 `json:"prefix_cache_hit_rate"`
	PrefixQueries float64 `json:"prefix_cache_queries"`
	PrefixHits    float64 `json:"prefix_cache_hits"`
	// Spread is the per-engine count of completed requests (vllm:request_success_total).
	Spread Spread `json:"load_spread"`
}

// FailedShare is the fraction of sent requests that failed, 0 when none was sent.
func (p PointResult) FailedShare() float64 {
	if p.Sent == 0 {
		return 0
	}
	return float64(p.Failed) / float64(p.Sent)
}

// outcome is what one request measured.
type outcome struct {
	ttft, e2e time.Duration
	end       time.Time
	tokens    int    // output tokens: the usage chunk's count if any, else the content chunks
	usage     bool   // the stream ended with a usage chunk
	endpoint  string // the pod that answered (x-switchboard-endpoint), when the gateway said
	err       string // empty on success
}

type chatBody struct {
	Model         string         `json:"model"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	MaxTokens     int            `json:"max_tokens"`
	Messages      []Message      `json:"messages"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// runPoint drives the fleet through strategy's route with workload at rate for duration,
// with arrivals and prompts drawn from arrivals; seed is the run's seed it is recorded with.
func (f *fleet) runPoint(ctx context.Context, w Workload, strategy string, rate float64, duration time.Duration, seed, arrivals uint64) (PointResult, error) {
	res := PointResult{Workload: w.Name, Strategy: strategy, Rate: rate, Seed: seed, Duration: duration.Seconds()}
	schedule, reqs := pointRequests(w, strategy, rate, duration, arrivals)
	var opts *streamOptions
	if f.cfg.IncludeUsage {
		opts = &streamOptions{IncludeUsage: true}
	}
	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		b, err := json.Marshal(chatBody{Model: benchModel, Stream: true, StreamOptions: opts, MaxTokens: r.MaxTokens, Messages: r.Messages})
		if err != nil {
			return res, fmt.Errorf("encode request: %w", err)
		}
		bodies[i] = b
	}

	before, err := f.scrapeCounters(ctx)
	if err != nil {
		return res, err
	}
	outcomes := make([]outcome, len(schedule))
	var wg sync.WaitGroup
	start := time.Now()
	for i, off := range schedule {
		if d := time.Until(start.Add(off)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return res, ctx.Err()
			}
		}
		wg.Go(func() { outcomes[i] = f.send(ctx, strategy, bodies[i]) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	after, err := f.scrapeCounters(ctx)
	if err != nil {
		return res, err
	}

	if f.cfg.Requests != nil {
		if err := writeRecords(f.cfg.Requests, res, schedule, reqs, outcomes); err != nil {
			return res, fmt.Errorf("write the requests' records: %w", err)
		}
	}
	var ttfts, e2es []time.Duration
	last := start
	tokens := 0
	for _, o := range outcomes {
		res.Sent++
		if o.err != "" {
			res.Failed++
			if res.Errors == nil {
				res.Errors = map[string]int{}
			}
			res.Errors[o.err]++
			continue
		}
		res.Completed++
		ttfts = append(ttfts, o.ttft)
		e2es = append(e2es, o.e2e)
		tokens += o.tokens
		if o.usage {
			res.UsageChunks++
		}
		if o.end.After(last) {
			last = o.end
		}
	}
	res.TTFT, res.E2E = Summarize(ttfts), Summarize(e2es)
	if span := last.Sub(start).Seconds(); span > 0 {
		res.Throughput = float64(res.Completed) / span
		res.TokenThroughput = float64(tokens) / span
	}
	perEngine := make([]float64, len(f.engines))
	for i := range f.engines {
		res.PrefixQueries += after[i].queries - before[i].queries
		res.PrefixHits += after[i].hits - before[i].hits
		perEngine[i] = after[i].requests - before[i].requests
	}
	if res.PrefixQueries > 0 {
		res.HitRate = res.PrefixHits / res.PrefixQueries
	}
	res.Spread = NewSpread(perEngine)
	return res, nil
}

// RequestRecord is what the load generator measured of one request of a load point.
type RequestRecord struct {
	Workload string  `json:"workload"`
	Strategy string  `json:"strategy"`
	Rate     float64 `json:"rate_rps"`
	Seed     uint64  `json:"seed"`
	// Index is the request's place in the point's arrivals, from 0.
	Index int `json:"index"`
	// SentAt is when the request was due, in seconds from the point's start.
	SentAt float64 `json:"sent_at_s"`
	// Kind is the request's shape (Request.Kind).
	Kind string `json:"kind"`
	// Endpoint is the pod that answered, as "namespace/name" (the gateway's
	// x-switchboard-endpoint header); empty when no pod answered.
	Endpoint string `json:"endpoint,omitempty"`
	// TTFT and E2E are in milliseconds; OutputTokens as PointResult counts them. All
	// three are zero for a failed request, whose Error says why.
	TTFT         float64 `json:"ttft_ms"`
	E2E          float64 `json:"e2e_ms"`
	OutputTokens int     `json:"output_tokens"`
	Error        string  `json:"error,omitempty"`
}

// writeRecords writes one RequestRecord line to w for each request of the point res.
func writeRecords(w io.Writer, res PointResult, schedule []time.Duration, reqs []Request, outcomes []outcome) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i, o := range outcomes {
		rec := RequestRecord{Workload: res.Workload, Strategy: res.Strategy, Rate: res.Rate, Seed: res.Seed,
			Index: i, SentAt: schedule[i].Seconds(), Kind: reqs[i].Kind, Endpoint: o.endpoint, Error: o.err}
		if o.err == "" {
			rec.TTFT, rec.E2E, rec.OutputTokens = milliseconds(o.ttft), milliseconds(o.e2e), o.tokens
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// pointRequests returns the arrival times and the requests of strategy's load point of w
// at rate over duration, drawn from the seed arrivals. Every strategy of a seed gets the
// same arrivals and request shapes; the salt makes the texts unique per point, so that no
// point profits from another's cached blocks.
func pointRequests(w Workload, strategy string, rate float64, duration time.Duration, arrivals uint64) ([]time.Duration, []Request) {
	schedule := PoissonSchedule(rate, duration, arrivals)
	salt := fmt.Sprintf("[%s/%s/%g/%d]", w.Name, strategy, rate, arrivals)
	return schedule, w.Generate(rand.New(rand.NewPCG(arrivals, 0xb0d1e5)), len(schedule), salt)
}

// send posts one streaming chat completion and measures it.
func (f *fleet) send(ctx context.Context, strategy string, body []byte) outcome {
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.gatewayURL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return outcome{err: "request: " + err.Error()}
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set(strategyHeader, strategy)
	resp, err := f.http.Do(req)
	if err != nil {
		return outcome{err: "transport error"}
	}
	defer func() { _ = resp.Body.Close() }()
	endpoint := resp.Header.Get(endpointHeader)
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return outcome{endpoint: endpoint, err: fmt.Sprintf("HTTP %d", resp.StatusCode)}
	}
	o := outcome{endpoint: endpoint}
	r := bufio.NewReaderSize(resp.Body, 16<<10)
	done := false
	contentChunks, usageTokens := 0, 0
	for {
		line, err := r.ReadSlice('\n')
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			if string(data) == "[DONE]" {
				done = true
			} else {
				c := parseChunk(data)
				if c.content {
					if contentChunks == 0 {
						o.ttft = time.Since(t0)
					}
					contentChunks++
				}
				if c.usage {
					o.usage, usageTokens = true, c.completionTokens
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			break
		}
	}
	o.end = time.Now()
	o.e2e = o.end.Sub(t0)
	if !done || contentChunks == 0 {
		return outcome{endpoint: endpoint, err: "incomplete stream"}
	}
	o.tokens = contentChunks
	if o.usage {
		o.tokens = usageTokens
	}
	return o
}

// streamChunk is what the load generator reads of one streamed chat chunk.
type streamChunk struct {
	// content is whether the chunk carries generated text; the first chunk only announces
	// the assistant role, the finishing one has an empty delta and the usage chunk no
	// choices at all.
	content bool
	// usage is whether the chunk reports the request's usage, with completionTokens.
	usage            bool
	completionTokens int
}

// parseChunk reads the data of one streamed chat chunk; a malformed chunk reads as neither
// content nor usage.
func parseChunk(data []byte) streamChunk {
	var c struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil {
		return streamChunk{}
	}
	var out streamChunk
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" {
			out.content = true
		}
	}
	if c.Usage != nil {
		out.usage, out.completionTokens = true, c.Usage.CompletionTokens
	}
	return out
}

// engineCounters are the cumulative counters the benchmark reads from one engine.
type engineCounters struct {
	queries, hits, requests float64
}

func (f *fleet) scrapeCounters(ctx context.Context) ([]engineCounters, error) {
	out := make([]engineCounters, len(f.engines))
	for i, e := range f.engines {
		text, err := f.scrape(ctx, e)
		if err != nil {
			return nil, err
		}
		if out[i], err = parseCounters(text); err != nil {
			return nil, fmt.Errorf("engine %s: %w", e, err)
		}
	}
	return out, nil
}

// parseCounters reads the prefix-cache and request counters from a vLLM metrics text.
func parseCounters(text []byte) (engineCounters, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(text)))
	if err != nil {
		return engineCounters{}, fmt.Errorf("parse metrics: %w", err)
	}
	sum := func(name string) float64 {
		total := 0.0
		if mf, ok := families[name]; ok {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
		return total
	}
	return engineCounters{
		queries:  sum("vllm:prefix_cache_queries_total"),
		hits:     sum("vllm:prefix_cache_hits_total"),
		requests: sum("vllm:request_success_total"),
	}, nil
}
