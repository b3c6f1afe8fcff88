// Package cache owns Switchboard's in-process metadata cache: the pod registry (engine
// endpoints and their latest metrics; in the gateway, also the ranks InferencePools make
// of their pods' target ports), the model registry (base models and LoRA adapters
// mapped to the endpoints that serve them), per-endpoint and per-model request tracking,
// and, for the gateway, stores of RoutingPolicies, Services, InferencePools, HTTPRoutes, Gateways and
// the TLS certificates of the Secrets those Gateways' listeners name (only those).
//
// Three init helpers build a cache context for one process role on a controller-runtime
// manager: InitForManager (pods and adapters), InitForMetadata (plus the engine scraper
// of metrics and model listings) and InitForGateway (plus policies, Services, routes,
// Gateways and the request Tracker). Each registers level-based reconcilers that read
// objects from the manager's informer cache and write plain values here; each returns a
// view narrowed to its role. There are no package-level singletons: a process or test
// may build any number of contexts.
//
// The engines are the truth for what is served. In the metadata and gateway contexts the
// Scraper lists each routable engine's models (GET /v1/models) every
// ScrapeOptions.ModelsRefreshInterval (1 s by default) alongside its 100 ms metrics
// scrapes, and the cache joins those listings with ModelAdapter placement
// (status.instances) and vllm:lora_requests_info: an adapter the engine lists, on the
// pod's base model, is served there with or without a ModelAdapter; an instance record
// the engine's latest listing refutes is not, once a listing requested after the record
// arrived has been read; before a pod's first listing, and for engines that refuse to
// be listed (401/403: the cache holds no engine credentials), placement decides. The
// manager context lists nothing, so placement alone decides there. The full rule is on
// the Cache type.
//
// Synchronisation model: control-path writers (reconcilers) are serialised by a
// writer-only mutex and publish whole immutable snapshots through an atomic.Pointer;
// request-path readers Load the current snapshot without taking any lock and may keep
// it as long as they like, because nothing reachable from a published snapshot is ever
// mutated. Metrics are swapped per endpoint through their own atomic.Pointer by the
// scraper, and request counters are atomics, so neither forces a new snapshot; a model
// listing republishes only its pod, and only when the pod's served adapters change.
//
// The package does not choose endpoints or write to the API server; routers and
// controllers built on top of it do.
package cache
