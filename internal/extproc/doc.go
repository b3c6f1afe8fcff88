// Package extproc serves the gateway's endpoint picker over Envoy's external-processing
// (ext_proc) gRPC protocol, following the Gateway API Inference Extension's Endpoint
// Picker Protocol v1.0.0:
//
//   - the data plane's subset hint (filter metadata envoy.lb.subset_hint /
//     x-gateway-destination-endpoint-subset) restricts the pick; an empty hint is
//     answered 503;
//   - once the Server holds the whole body, a Picker chooses an ordered list of endpoints
//     (primary, then fallbacks), which the Server sets both as the
//     x-gateway-destination-endpoint request header and, identical, in dynamic metadata
//     envoy.lb / x-gateway-destination-endpoint;
//   - failures become an immediate OpenAI-shaped JSON error response (503 no endpoint,
//     429 shed, 404 unknown model, 413 body too large);
//   - the response's metadata envoy.lb / x-gateway-destination-endpoint-served tells the
//     Picker's reservation which endpoint served;
//   - the body of a 200 answer, where the data plane sends it, is passed to the
//     reservation chunk by chunk (an engine's first token, its usage);
//   - the reservation is released when the response ends, or when the stream ends for
//     any other reason;
//   - Serve adds gRPC health with the services liveness, readiness and
//     envoy.service.ext_proc.v3.ExternalProcessor.
//
// The request body may come in BUFFERED or FULL_DUPLEX_STREAMED mode (announced in the
// stream's protocol_config; BUFFERED when absent). Response headers and body may be sent
// or skipped.
//
// The package owns only the protocol translation. It does not parse bodies, choose
// endpoints or track load (the Picker does), nor configure Envoy (the gateway binary's
// flags choose the address).
package extproc
