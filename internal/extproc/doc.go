// Package extproc serves the gateway's endpoint picker over Envoy's external-processing
// (ext_proc) gRPC protocol, following the Gateway API Inference Extension endpoint-picker
// protocol: for each HTTP request Envoy streams the request headers and body to the
// Server, which asks a Picker for an endpoint once it holds the whole body and answers
// with the x-gateway-destination-endpoint request header and the same "ip:port" in
// dynamic metadata under the envoy.lb namespace. Failures become an immediate
// OpenAI-shaped JSON error response.
//
// Envoy must send request headers and the request body in BUFFERED mode, so that it holds
// the request until the picker has answered; response headers and body may be sent or
// skipped. The Server releases the Picker's reservation when the response ends, or when
// the ext_proc stream ends for any other reason.
//
// The package owns only the protocol translation. It does not parse bodies, choose
// endpoints or track load (the Picker does), nor configure Envoy or listen on a port (the
// gateway binary does).
package extproc
