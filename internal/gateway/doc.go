// Package gateway is Switchboard's data plane: it matches requests against the Gateway
// API route table compiled from the cache, applies the RoutingPolicy named by the
// matched rule's ExtensionRef filter (or the default strategy), lets the policy's router
// select and reserve an engine endpoint among the ready pods behind the rule's Service
// backends that serve the requested model, and proxies the OpenAI-compatible request to
// it, streaming included, releasing the reservation when the response ends.
//
// The request path reads only the gateway's cache view; it never calls the API server.
// The package does not compile routes (routetable does), route (routing does) or speak
// Envoy's ext_proc protocol (extproc does, through Gateway.Pick).
package gateway

// The gateway only reads (DESIGN §1): the objects its cache context watches.
// +kubebuilder:rbac:groups="",resources=pods;services,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=routingpolicies;modeladapters,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses;gateways;httproutes,verbs=get;list;watch
