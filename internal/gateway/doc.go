// Package gateway is Switchboard's data plane: it serves each of Switchboard's Gateways on
// its own address, terminating TLS on HTTPS listeners with the certificate of the
// listener the client's server name selects, matches requests against the Gateway API
// route table compiled from the cache (answering 421 a request whose host belongs to
// another listener than its connection's server name), applies the matched rule's
// filters, draws one of the rule's backends by weight and proxies the request to a
// ready pod of that backend's Service, streaming included.
// On a rule with a RoutingPolicy ExtensionRef filter the request is an OpenAI-compatible
// one and the policy's router selects and reserves an engine pod that serves its model;
// on any other rule the request is proxied unchanged, balanced by least request.
//
// The request path reads only the gateway's cache view; it never calls the API server,
// and never sends a request outside the matched rule's backends. The package does not
// compile routes or decide their status (routetable does), route (routing does), bound
// client reads (inbound does) or speak Envoy's ext_proc protocol (extproc does, through
// Picker).
package gateway

// The gateway only reads (DESIGN §1) the objects its cache context watches; its only
// writes are the ext_proc picker's Lease, with --ext-proc-leader-elect, and the Events
// its leader election records.
// +kubebuilder:rbac:groups="",resources=pods;services;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=routingpolicies;modeladapters,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses;gateways;httproutes;referencegrants,verbs=get;list;watch
// Secrets are watched metadata-only; only those Gateways' listeners name are read.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.networking.k8s.io,resources=inferencepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
