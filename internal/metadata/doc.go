// Package metadata owns the metadata service's read-only HTTP API over the cache's
// metadata view (DESIGN §1): GET /v1/models and GET /v1/models/{model} list the base
// models and LoRA adapters that have at least one routable endpoint, in OpenAI's model
// list format; GET /v1/endpoints lists the engine pods with their adapters, request
// counters and latest engine metrics snapshot. Errors are OpenAI-shaped JSON.
//
// The package only reads: it does not watch the API server, scrape engines, track
// requests or pick endpoints. The cache package feeds the Reader it is given; cmd/
// metadata-service wires both into a controller-runtime manager, serving the handler
// through NewServer.
package metadata

// The metadata service only reads: the objects its cache context watches.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=modeladapters,verbs=get;list;watch
