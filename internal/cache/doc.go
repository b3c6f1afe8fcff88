// Package cache owns Switchboard's in-process metadata cache: the pod registry (engine
// endpoints and their latest metrics), the model registry (base models and LoRA adapters
// mapped to the endpoints that serve them), per-endpoint and per-model request tracking,
// and, for the gateway, stores of RoutingPolicies, Services, HTTPRoutes and Gateways.
//
// Three init helpers build a cache context for one process role on a controller-runtime
// manager: InitForManager (pods and adapters), InitForMetadata (plus the engine metrics
// scraper) and InitForGateway (plus policies, Services, routes, Gateways and the request
// Tracker). Each registers level-based reconcilers that read objects from the manager's
// informer cache and write plain values here; each returns a view narrowed to its role.
// There are no package-level singletons: a process or test may build any number of
// contexts.
//
// Synchronisation model: control-path writers (reconcilers) are serialised by a
// writer-only mutex and publish whole immutable snapshots through an atomic.Pointer;
// request-path readers Load the current snapshot without taking any lock and may keep
// it as long as they like, because nothing reachable from a published snapshot is ever
// mutated. Metrics are swapped per endpoint through their own atomic.Pointer by the
// scraper, and request counters are atomics, so neither forces a new snapshot.
//
// The package does not choose endpoints or write to the API server; routers and
// controllers built on top of it do.
package cache
