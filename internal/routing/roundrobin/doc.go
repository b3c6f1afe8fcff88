// Package roundrobin implements the round-robin routing strategy: successive decisions
// go to successive candidates in key order, wrapping around.
//
// It reads neither engine metrics nor load counters, so missing or stale metrics do not
// affect it: it always decides, never returns routing.ErrUndecided, and the policy's
// fallback never runs for it.
//
// The package owns the turn counters of each Router: one for small candidate sets, and
// for large ones a counter of spans of turns and a stripe of turns per core, so that
// decisions on several cores share no counter. It does not reserve the chosen endpoint
// (the routing core does) and does not order the candidates: it relies on the router
// offering them sorted by key, as the cache lists them.
package roundrobin
