// Package leastlatency implements the least-latency routing strategy: each request goes
// to the candidate expected to complete it soonest, given the engine's queue, its
// recent prefill and decode speeds, and the request's own prompt and completion lengths.
//
// The estimate is internal/routing/ttft's model without a prefix term: for a request
// with P prompt tokens (Request.PromptTokens) and N completion tokens (Request.MaxTokens,
// or DefaultMaxTokens when the request does not say),
//
//	latency = wait + P × prefill-per-token + N × decode-per-token
//
// where wait is the time until the engine runs the request (ttft.Estimator.Wait: the
// requests beyond its learnt slots, or queued and sent since the last scrape, each
// freeing a slot after the engine's recent service time over its slots), and the rates
// are those the engine showed over the last seconds of scrapes (endpoint.Profile, built
// from the differences between scrapes, not lifetime means). An endpoint with fresh
// metrics whose speed is not learnt yet (a new, idle one) is estimated with the mean
// speed of the learnt candidates, so that it gets traffic.
//
// The request goes to the least latency; among equal latencies (engines with room for
// it, alike), to the candidate with the fewest requests in flight, so that a burst
// spreads as least-request spreads it; among those, to one drawn at random. As a
// weighted policy's scorer, each candidate scores minus its latency.
//
// Candidates whose metrics are missing or stale are unknown and skipped: they are never
// picked and score below every known candidate. When every candidate is unknown, or no
// candidate's speed is learnt, the strategy returns routing.ErrUndecided and the
// policy's fallback decides.
//
// A decision reads each candidate's hot cell once (Router.PickPod) and the candidates'
// pooled speed from a ttft.Pooled. The package owns only the estimate and the choice: it
// does not scrape metrics (the cache does) or reserve the chosen endpoint (the routing
// core does).
package leastlatency
