// Package throughput implements the throughput routing strategy: each request goes to
// the candidate whose engine processed the fewest tokens per second recently.
//
// An endpoint's throughput is the growth of its cumulative prompt plus generation token
// counters between the two most recent distinct metrics snapshots (different ScrapedAt)
// that the Router has seen of it, divided by the time between them. While some candidate
// with fresh metrics has only one snapshot seen (a new endpoint, the Router's first
// decisions, an engine restart), throughputs are not comparable across the candidates,
// and every candidate with fresh metrics is compared by its engine's Running requests
// instead.
//
// Candidates whose metrics are missing or stale are unknown: they are never picked and
// score below every known candidate. When every candidate is unknown the strategy
// returns routing.ErrUndecided and the policy's fallback decides.
//
// The package owns the per-endpoint snapshot history one Router remembers, bounded by
// forgetting endpoints with no snapshot newer than Retention, and scores candidates as a
// routing.Scorer. It does not pick the highest score (routing.Highest does, ties broken
// at random, as the strategies registry wraps the Router), scrape metrics (the cache
// does) or reserve the chosen endpoint (the routing core does).
package throughput
