// Package throughput implements the throughput routing strategy: each request goes to
// the candidate whose engine processed the fewest tokens per second recently.
//
// An endpoint's throughput is the growth of its engine's cumulative prompt plus
// generation token counters over the last scrape interval (endpoint.Profile.Throughput,
// learnt by the cache from each scrape and the one before it). While some candidate with
// fresh metrics has no throughput known yet (a new endpoint, or an engine scraped once
// since it restarted), throughputs are not comparable across the candidates, and every
// candidate with fresh metrics is compared by its engine's Running requests instead. In
// both cases each request this process has in flight on a candidate counts on top
// (tokens/s at the candidate's own rate per running request, or one running request),
// so that a burst between scrapes spreads; among equal loads, the fewest in flight wins,
// then a draw at random. As a weighted policy's scorer, each candidate scores minus its
// projected load.
//
// Candidates whose metrics are missing or stale are unknown: they are never picked and
// score below every known candidate. When every candidate is unknown the strategy
// returns routing.ErrUndecided and the policy's fallback decides.
//
// A decision reads each candidate's hot cell once, or twice while a throughput is
// unknown or an idle engine has requests in flight (Router.PickPod), and keeps no state.
// The package does not scrape metrics (the cache does) or reserve the chosen endpoint
// (the routing core does).
package throughput
