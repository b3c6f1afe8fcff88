// Package epp is a black-box test suite for endpoint pickers that speak the Gateway API
// Inference Extension's Endpoint Picker Protocol (v1.0.0) over Envoy ext_proc gRPC. Run
// plays Envoy's side against any picker's gRPC address, given what it needs to know about
// the picker's pool (Pool), with one test per protocol rule: the subset hint, the
// destination header and envoy.lb metadata, the fallback list, the served endpoint,
// immediate responses, BUFFERED and FULL_DUPLEX_STREAMED body modes, gRPC health, and the
// release of the request's reservation when its stream ends.
//
// The package's own test runs the suite against Switchboard's gateway binary.
package epp
