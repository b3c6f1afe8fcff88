// Package cache owns Switchboard's in-process metadata cache: the pod registry (engine
// endpoints and their latest metrics), the model registry (base models and LoRA adapters
// mapped to the endpoints that serve them) and per-endpoint and per-model request tracking.
// It also maps vLLM and SGLang Prometheus exposition text to endpoint.Metrics.
//
// Synchronisation model: control-path writers (reconcilers, scrapers) are serialised by a
// writer-only mutex and publish whole immutable snapshots through an atomic.Pointer;
// request-path readers Load the current snapshot without taking any lock and may keep
// it as long as they like, because nothing reachable from a published snapshot is ever
// mutated. Metrics are swapped per endpoint through their own atomic.Pointer, and request
// counters are atomics, so neither forces a new snapshot.
//
// The package does not watch the API server, scrape endpoints or choose endpoints;
// informers, scrapers and routers built on top of it do.
package cache
