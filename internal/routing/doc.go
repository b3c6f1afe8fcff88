// Package routing decides which engine endpoint serves a request.
//
// A RoutingContext carries one request's facts and candidate endpoints, and a promise
// that a Router resolves with a Target (an endpoint already reserved for the request) or
// rejects with an error. Routing algorithms live in sub-packages, one per strategy; each
// implements Scorer (rank the candidates) and, where it needs more than "highest score
// wins", Picker. Most also decide straight from the candidates' hot cells (PodPicker,
// CellScorer), so that a decision over thousands of endpoints reads one small cell each
// and builds no Candidate. NewRouter turns a Picker into a synchronous Router that selects and
// reserves in one step; NewQueue turns one into an asynchronous Router that holds
// requests, bounded per model and in time, while every candidate is at its concurrency
// limit, in an Admission that every router of the process shares.
//
// Routers read immutable cache snapshots (cache.Pod, cache.Model) and atomic counters;
// they share no maps with the cache and take no global lock. The package imports the
// cache; the cache never imports it.
//
// The package does not parse HTTP requests, proxy them or build routers from
// RoutingPolicies by name; the gateway and the strategies registry do.
package routing
