// Package leastlatency implements the least-latency routing strategy: each request goes
// to the candidate expected to complete it soonest, given the engine's queue, its
// observed prefill and decode speeds, and the request's own prompt and completion
// lengths.
//
// For candidate i with fresh metrics m, our in-flight count f, and a request with P
// prompt tokens (Request.PromptTokens) and N completion tokens (Request.MaxTokens, or
// DefaultMaxTokens when the request does not say), the expected latency in seconds is
//
//	latency = queue + prefill + decode
//	queue   = ahead / max(m.Running, 1) × service
//	ahead   = m.Waiting + max(0, f − m.Running − m.Waiting)
//	prefill = P × m.TTFT.Sum / m.PromptTokens
//	decode  = N × m.TPOT.Mean()
//	service = m.E2E.Mean()
//
// ahead counts the requests the engine has queued plus those we sent that its last
// scrape does not show yet; the engine works through them about max(Running, 1) at a
// time, each taking its mean end-to-end latency. The per-token prefill time is total
// time-to-first-token over total prompt tokens, so it includes the engine's queueing as
// observed. An endpoint is observed when its TTFT, TPOT and E2E histograms have
// observations and its prompt-token counter is positive; an endpoint with fresh metrics
// that is not observed yet (typically a new, idle one) is estimated with the mean
// per-token times and service time of the observed candidates, so that it gets traffic.
//
// Candidates whose metrics are missing or stale are unknown and skipped: they are never
// picked and score below every known candidate. When every candidate is unknown, or no
// candidate is observed, the strategy returns routing.ErrUndecided and the policy's
// fallback decides.
//
// The package owns only the estimate, scored by a routing.Scorer: it does not pick the
// highest score (routing.Highest does, ties broken at random, as the strategies registry
// wraps the Router), scrape metrics (the cache does) or reserve the chosen endpoint (the
// routing core does).
package leastlatency
