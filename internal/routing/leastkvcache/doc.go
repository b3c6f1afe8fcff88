// Package leastkvcache implements the least-kv-cache routing strategy: each request goes
// to the candidate whose engine reports the smallest fraction of KV-cache blocks in use.
//
// Candidates whose metrics are missing or stale are unknown: they are never picked and
// score below every known candidate. When every candidate is unknown the strategy
// returns routing.ErrUndecided and the policy's fallback decides.
//
// The package owns only the choice. It does not scrape metrics (the cache does) or
// reserve the chosen endpoint (the routing core does).
package leastkvcache
