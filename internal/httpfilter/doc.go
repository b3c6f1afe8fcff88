// Package httpfilter implements the Gateway API HTTPRoute filters that act on one request
// and its response: RequestHeaderModifier, ResponseHeaderModifier, RequestRedirect and
// URLRewrite, with the semantics of sigs.k8s.io/gateway-api apis/v1 httproute_types.go and
// its conformance tests.
//
// Compile turns the filter list of a rule (or of a backendRef) into an immutable Chain on
// the control path, validating what the API server's CRD validation may not have, and
// describing every filter it cannot honour so that the caller can answer 500 and write the
// route's status instead of skipping the filter. On the request path a Chain reads only
// net/http values: Redirect builds the Location of a RequestRedirect, ModifyRequest edits
// the request about to be sent upstream, ModifyResponse edits the response headers about
// to be written to the client.
//
// The package does not implement ExtensionRef or RequestMirror filters (Compile skips them
// for the caller), choose backends, proxy requests, or write status.
package httpfilter
