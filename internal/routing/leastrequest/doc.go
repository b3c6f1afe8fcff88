// Package leastrequest implements the least-request routing strategy: each request goes
// to the candidate with the fewest requests in flight through this gateway, ties broken
// uniformly at random.
//
// It reads only the gateway's own reservation counters (routing.Candidate.InFlight),
// never engine metrics, so missing or stale metrics do not affect it: it always decides
// and never returns routing.ErrUndecided. That is why it is the default fallback of every
// RoutingPolicy.
//
// The Router scores candidates (for weighted policies) and picks the lowest count itself,
// ties broken uniformly at random, either among routing.Candidates or straight from the
// candidate pods' counters (routing.PodPicker), which reads one counter per endpoint and
// allocates nothing. Reserving the chosen endpoint is the routing core's job; because the
// core reserves only if the in-flight count is still the one the choice was made on,
// concurrent decisions spread as if made one after another.
package leastrequest
