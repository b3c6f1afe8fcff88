// Package weighted implements the weighted routing strategy: several strategies' scores,
// each normalised to [0, 1] over the candidates, summed by weight; the highest total
// wins.
//
// The normalisation keeps proportions: a candidate scores 1 − (its shortfall from the
// best) / (the largest of the scores' range and magnitudes), so that 0.50 against 0.51
// is a 2% difference of the term's weight, while a full prefix match against none, or
// an idle endpoint against a busy one, is the whole weight. Terms thereby trade off in
// proportion to their weights instead of the tightest term swinging a full weight on
// noise (min–max scaling).
//
// A term whose scorer cannot decide (routing.ErrUndecided, for instance because its
// metrics are missing or stale) is left out of that decision; when every term is
// undecided the Router is undecided too and the policy's fallback decides. Only the
// terms' scores are combined: their own pickers' logic, such as a load guard, does not
// apply, while their learners do learn every routed request.
//
// When every term's scorer also scores from hot cells (routing.CellScorer), as those of
// least-request, least-kv-cache, least-latency, throughput and prefix-cache do, a
// decision reads each pod's cell rather than building Candidates.
//
// The package owns the combination only. It does not build the terms from strategy
// names or validate a RoutingPolicy; the strategies registry does.
package weighted
