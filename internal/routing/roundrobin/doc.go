// Package roundrobin implements the round-robin routing strategy: successive decisions
// go to successive candidates in key order, wrapping around.
//
// It reads neither engine metrics nor load counters, so missing or stale metrics do not
// affect it: it always decides, never returns routing.ErrUndecided, and the policy's
// fallback never runs for it.
//
// The package owns one turn counter per Router. It does not reserve the chosen endpoint
// (the routing core does) and does not order the candidates: it relies on the router
// offering them sorted by key, as the cache lists them.
package roundrobin
