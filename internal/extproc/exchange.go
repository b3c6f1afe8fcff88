package extproc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// exchange is the state of one ext_proc stream. Every field is owned by the goroutine
// running Process for that stream; nothing else reads or writes them.
type exchange struct {
	server *Server
	// requestMode and responseMode are the body modes of protocol_config; NONE when the
	// data plane did not say.
	requestMode, responseMode extprocfilterv3.ProcessingMode_BodySendMode
	headers                   http.Header
	subset                    map[string]bool
	body                      []byte
	// picked is set once Pick has been called; the Picker is asked at most once.
	picked bool
	// endpoints are the Picker's endpoints, once it picked.
	endpoints []string
	// reservation is the Picker's, nil until a pick returned one and again once released.
	reservation Reservation
	// servedSeen is set once the data plane said which endpoint served.
	servedSeen bool
	// answered is set by response headers of status 200, whose body the reservation is
	// passed.
	answered bool
}

// fullDuplex reports whether the request body comes in FULL_DUPLEX_STREAMED mode.
func (x *exchange) fullDuplex() bool {
	return x.requestMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

// finish releases the reservation if there is one and it has not been released yet.
func (x *exchange) finish() {
	if r := x.reservation; r != nil {
		x.reservation = nil
		r.Release()
	}
}

// handle returns the answers to req, in order, and whether they end the exchange.
func (x *exchange) handle(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, bool) {
	if pc := req.GetProtocolConfig(); pc != nil {
		x.requestMode, x.responseMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
	}
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return x.requestHeaders(ctx, req, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.requestBody(ctx, r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return x.requestTrailers(ctx)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		x.learnServed(ctx, req)
		x.answered = headerValue(r.ResponseHeaders.GetHeaders(), ":status") == "200"
		if r.ResponseHeaders.GetEndOfStream() {
			x.finish()
		}
		return one(headersResponse(false, nil)), false
	case *extprocv3.ProcessingRequest_ResponseBody:
		x.learnServed(ctx, req)
		if chunk := r.ResponseBody.GetBody(); len(chunk) > 0 && x.answered && x.reservation != nil {
			x.reservation.Answer(chunk)
		}
		if r.ResponseBody.GetEndOfStream() {
			x.finish()
		}
		if x.responseMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			return one(streamedBodyResponse(false, r.ResponseBody.GetBody(), r.ResponseBody.GetEndOfStream())), false
		}
		return one(bodyResponse(false, nil)), false
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		x.learnServed(ctx, req)
		x.finish()
		return one(trailersResponse(false)), false
	default:
		// No phase set (for example a flow-control-only message): nothing to answer.
		return nil, false
	}
}

// requestHeaders answers the request headers: they end a body-less request, which is
// picked at once; in FULL_DUPLEX_STREAMED mode they are held until the body is whole.
func (x *exchange) requestHeaders(ctx context.Context, req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, bool) {
	x.headers = httpHeader(h.GetHeaders())
	x.subset = subsetHint(req.GetMetadataContext())
	if n, err := strconv.ParseInt(x.headers.Get("Content-Length"), 10, 64); err == nil && n > x.server.maxBodyBytes {
		return one(x.bodyTooLarge(ctx)), true
	}
	if h.GetEndOfStream() {
		return x.pick(ctx, phaseHeaders)
	}
	if x.fullDuplex() {
		return nil, false
	}
	return one(headersResponse(true, nil)), false
}

// requestBody buffers a body chunk and picks once the body is whole: at its end, or at
// once in BUFFERED mode, where one message holds the whole body even if trailers follow.
func (x *exchange) requestBody(ctx context.Context, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, bool) {
	chunk := b.GetBody()
	if x.picked {
		if x.fullDuplex() {
			return one(streamedBodyResponse(true, chunk, b.GetEndOfStream())), false
		}
		return one(bodyResponse(true, nil)), false
	}
	if int64(len(x.body))+int64(len(chunk)) > x.server.maxBodyBytes {
		x.body = nil
		return one(x.bodyTooLarge(ctx)), true
	}
	x.body = append(x.body, chunk...)
	if !b.GetEndOfStream() && x.requestMode != extprocfilterv3.ProcessingMode_BUFFERED {
		// Routing needs the whole body; the data plane holds the request until then.
		return nil, false
	}
	return x.pick(ctx, phaseBody)
}

// requestTrailers answers the request trailers; in FULL_DUPLEX_STREAMED mode they follow
// the last body chunk, so the body is whole and the request is picked first.
func (x *exchange) requestTrailers(ctx context.Context) ([]*extprocv3.ProcessingResponse, bool) {
	if x.picked || !x.fullDuplex() {
		return one(trailersResponse(true)), false
	}
	resps, last := x.pick(ctx, phaseTrailers)
	if last {
		return resps, true
	}
	return append(resps, trailersResponse(true)), false
}

// phase is the request message whose arrival completed the request: trailers do only
// in FULL_DUPLEX_STREAMED mode.
type phase int

const (
	phaseHeaders phase = iota
	phaseBody
	phaseTrailers
)

// pick asks the Picker for endpoints and returns the answers routing the request, or an
// immediate error response that ends the exchange.
func (x *exchange) pick(ctx context.Context, at phase) ([]*extprocv3.ProcessingResponse, bool) {
	x.picked = true
	body := x.body
	x.body = nil
	if x.subset != nil && len(x.subset) == 0 {
		return one(errorResponse(ctx, &statusError{status: http.StatusServiceUnavailable,
			message: "the request's endpoint subset is empty"})), true
	}
	p, err := x.server.picker.Pick(ctx, Request{Headers: x.headers, Body: body, Subset: x.subset})
	x.reservation = p.Reservation
	if err == nil {
		err = x.checkPick(p)
	}
	if err != nil {
		x.finish()
		if ctx.Err() != nil {
			return nil, true // Envoy has gone away; Process ends the stream.
		}
		return one(errorResponse(ctx, err)), true
	}
	x.endpoints = p.Endpoints
	log.FromContext(ctx).V(1).Info("Picked endpoints", "endpoints", p.Endpoints)
	return x.routed(at, body), false
}

// checkPick checks that the Picker kept to the protocol: distinct "ip:port" endpoints,
// at least one, all in the subset hint.
func (x *exchange) checkPick(p Pick) error {
	if len(p.Endpoints) == 0 {
		return fmt.Errorf("picker returned no endpoint")
	}
	seen := make(map[string]bool, len(p.Endpoints))
	for _, e := range p.Endpoints {
		if _, _, err := net.SplitHostPort(e); err != nil {
			return fmt.Errorf("picker returned endpoint %q: %w", e, err)
		}
		if seen[e] {
			return fmt.Errorf("picker returned endpoint %q twice", e)
		}
		seen[e] = true
		if x.subset != nil && !x.subset[e] {
			return fmt.Errorf("picker returned endpoint %q outside the request's subset", e)
		}
	}
	return nil
}

// routed returns the answers that route the request to x.endpoints once the message of
// phase at completed it; body is the buffered request body.
func (x *exchange) routed(at phase, body []byte) []*extprocv3.ProcessingResponse {
	dest := strings.Join(x.endpoints, ",")
	common := routeMutation(dest)
	// In FULL_DUPLEX_STREAMED mode the request headers were held; otherwise they were
	// answered already, unless they ended the request, and the body answer mutates them.
	first := bodyResponse(true, common)
	if at == phaseHeaders || x.fullDuplex() {
		first = headersResponse(true, common)
	}
	first.DynamicMetadata = destinationMetadata(dest)
	resps := one(first)
	if x.fullDuplex() && at != phaseHeaders {
		resps = append(resps, streamBack(body, at == phaseBody)...)
	}
	return resps
}

// learnServed tells the reservation which endpoint served, the first time a response
// message's metadata names a picked one; a report of any other endpoint is ignored.
func (x *exchange) learnServed(ctx context.Context, req *extprocv3.ProcessingRequest) {
	if x.servedSeen || x.reservation == nil {
		return
	}
	served := servedEndpoint(req.GetMetadataContext())
	if served == "" {
		return
	}
	for _, e := range x.endpoints {
		if e == served {
			x.servedSeen = true
			x.reservation.Served(served)
			return
		}
	}
	log.FromContext(ctx).V(1).Info("Data plane reports an endpoint that was not picked", "served", served, "endpoints", x.endpoints)
}

// bodyTooLarge answers a request whose body exceeds the limit.
func (x *exchange) bodyTooLarge(ctx context.Context) *extprocv3.ProcessingResponse {
	return errorResponse(ctx, &statusError{
		status:  http.StatusRequestEntityTooLarge,
		message: fmt.Sprintf("request body exceeds %d bytes", x.server.maxBodyBytes),
	})
}

func one(r *extprocv3.ProcessingResponse) []*extprocv3.ProcessingResponse {
	return []*extprocv3.ProcessingResponse{r}
}
