// Package bench is the routing-quality benchmark behind `make bench`: it runs a fleet of
// engine-sim engines behind the real gateway (on a private local control plane), drives it
// with seeded open-loop workloads for every routing strategy and request rate, several seeds
// each (the report shows medians, ranges and ratios to least-request and random), collects the
// gateway-overhead and cache/routing micro-benchmarks with `go test -bench`, and writes the
// machine-readable results and the generated report (docs/benchmarks.json, benchmarks.md and
// PNG plots).
//
// It owns the processes it starts and stops every one of them before Run returns. It does
// not own the strategies or the gateway it measures; it only talks to them over HTTP and the
// Kubernetes API, like an operator would; of the gateway's code it reads only its default
// retry budget, to report it.
package bench
