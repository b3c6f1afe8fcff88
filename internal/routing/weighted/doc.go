// Package weighted implements the weighted routing strategy: several strategies' scores,
// each normalised to [0, 1] over the candidates, summed by weight; the highest total
// wins.
//
// A term whose scorer cannot decide (routing.ErrUndecided, for instance because its
// metrics are missing or stale) is left out of that decision; when every term is
// undecided the Router is undecided too and the policy's fallback decides. Only the
// terms' scores are combined: their own pickers' logic, such as a load guard, does not
// apply, while their learners do learn every routed request.
//
// The package owns the combination only. It does not build the terms from strategy
// names or validate a RoutingPolicy; the strategies registry does.
package weighted
