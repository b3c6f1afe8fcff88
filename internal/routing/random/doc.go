// Package random implements the random routing strategy: each request goes to a
// candidate chosen uniformly at random.
//
// It reads neither engine metrics nor load counters, so missing or stale metrics do not
// affect it: it always decides, never returns routing.ErrUndecided, and the policy's
// fallback never runs for it.
//
// The package owns only the choice. It does not reserve the chosen endpoint (the routing
// core does) and keeps no state besides its source of randomness.
package random
