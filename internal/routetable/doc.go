// Package routetable compiles Gateway API objects into an immutable route table that the
// gateway's request path matches requests against.
//
// Build takes GatewayClasses, Gateways, HTTPRoutes and ReferenceGrants as plain values and
// returns a Table: the HTTP and HTTPS listeners of Gateways whose class names
// ControllerName, and for every listener port the attached route rules, pre-sorted by
// Gateway API precedence, and on HTTPS ports the listeners' certificates. Match
// picks the rule for one request with no locks and no allocations on the common path, so a
// Table can be published behind an atomic.Pointer and read by any number of goroutines.
//
// Semantics follow the Gateway API spec (apis/v1 httproute_types.go, gateway_types.go):
// parentRef attachment (sectionName, port, allowedRoutes namespaces and kinds), listener and
// route hostname intersection, path/header/method/query matching and match precedence.
// Listeners that share a port are merged; a request is served only by the listener whose
// hostname most specifically matches its Host (listener isolation), so routes attached to
// "*.example.com" never answer for a sibling listener "a.example.com". On an HTTPS port
// the TLS server name picks the listener whose certificate a connection presents
// (Certificates) by the same rule, and a request whose Host belongs to another listener
// is misdirected (Misdirected). HTTPS listeners terminate TLS with the kubernetes.io/tls
// Secrets their tls.certificateRefs name, in other namespaces only where a ReferenceGrant
// permits (ParseCertificate reads one; CertificateRefs lists those a Gateway names).
//
// The package owns translation and matching only. It does not watch or read the Kubernetes
// API, resolve Services to pods, load RoutingPolicies or Secrets, write route or Gateway
// status, terminate TLS or proxy requests: it records what a rule refers to
// (Rule.Backends, Rule.Policy), what it cannot honour (Rule.InvalidFilter,
// Rule.RejectedBackends) and which certificates a listener has (Listener.TLS) for the
// gateway and the controllers to act on.
package routetable
