// Package outlier is the gateway's passive health checking (outlier detection, with
// Envoy's consecutive-failure semantics): it counts each endpoint's failures in a row,
// ejects an endpoint that reaches a threshold for a back-off period that grows with each
// ejection, and leaves ejected endpoints out of a request's candidates, never more than a
// configured share of them.
//
// It owns the per-pod ejection state only. It does not decide what counts as a failure
// (the gateway reports each round trip's outcome), does not retry requests, and does not
// export metrics or logs itself: it reports ejections and returns to an Events value.
package outlier
