package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	// DestinationEndpointHeader is the request header, and the dynamic-metadata key, through
	// which the Server tells Envoy the picked endpoint as "ip:port".
	DestinationEndpointHeader = "x-gateway-destination-endpoint"
	// DestinationEndpointNamespace is the dynamic-metadata namespace that holds
	// DestinationEndpointHeader.
	DestinationEndpointNamespace = "envoy.lb"
	// DefaultMaxBodyBytes is the request body limit used when Options.MaxBodyBytes is not set.
	DefaultMaxBodyBytes int64 = 8 << 20
)

// Picker chooses and reserves an endpoint for one request.
type Picker interface {
	// Pick parses the OpenAI-compatible body, picks an endpoint for its model among the
	// candidates, and reserves it. On success endpoint is "ip:port" and the returned
	// release MUST be called once when the response ends; the Server does so. Pick should
	// return when ctx ends.
	//
	// An error may implement interface{ HTTPStatus() int }; its status (4xx or 5xx) and
	// message are shown to the client. Any other error is answered with 500 and a generic
	// message. A release returned together with an error is called at once.
	Pick(ctx context.Context, headers http.Header, body []byte) (endpoint string, release func(), err error)
}

// Options configures a Server.
type Options struct {
	// MaxBodyBytes bounds the request body the Server buffers before picking; a request
	// whose Content-Length or body exceeds it is answered with 413 and never reaches the
	// Picker. Zero or negative means DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// Server is an Envoy ext_proc server that routes each request to the endpoint its Picker
// chooses. One ext_proc stream carries one HTTP request. A Server is safe for concurrent
// streams; it keeps no state between them.
type Server struct {
	picker       Picker
	maxBodyBytes int64
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// NewServer returns a Server that asks p for endpoints.
func NewServer(p Picker, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return &Server{picker: p, maxBodyBytes: opts.MaxBodyBytes}
}

// Register registers s as the envoy.service.ext_proc.v3.ExternalProcessor service on g.
func (s *Server) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, s)
}

// grpcHeadroom is what a ProcessingRequest carries beside the body chunk it holds.
const grpcHeadroom = 64 << 10

// GRPCServer returns a gRPC server serving s that accepts messages as large as the body s
// buffers, plus headroom: Envoy's BUFFERED body mode sends the whole body in one message,
// beyond gRPC's default 4 MiB limit.
func (s *Server) GRPCServer() *grpc.Server {
	g := grpc.NewServer(grpc.MaxRecvMsgSize(int(min(s.maxBodyBytes+grpcHeadroom, math.MaxInt32))))
	s.Register(g)
	return g
}

// Process serves one ext_proc stream, that is one HTTP request:
//
//   - request headers are answered with CONTINUE, unless they end the request, in which
//     case the Server picks at once with an empty body;
//   - request body chunks are buffered (up to MaxBodyBytes) without an answer until the
//     end of the body; then the Server picks and answers with a header mutation setting
//     DestinationEndpointHeader, a route-cache clear, and dynamic metadata
//     {DestinationEndpointNamespace: {DestinationEndpointHeader: endpoint}};
//   - a failed pick or an oversized body is answered with an immediate OpenAI-shaped JSON
//     error response, after which the Server ends the stream;
//   - response headers, body chunks and trailers of either direction are answered with
//     CONTINUE; the end of the response releases the reservation.
//
// The reservation is released exactly once: at the end of the response, or when the
// stream ends for any reason. In observability mode nothing can be routed, so the Server
// ends the stream at once. Process returns nil when Envoy closes the stream.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	x := &exchange{server: s}
	defer x.finish()

	for {
		req, err := stream.Recv()
		if err != nil {
			return streamError(ctx, err)
		}
		if req.GetObservabilityMode() {
			return nil
		}
		resp, last := x.handle(ctx, req)
		if ctx.Err() != nil {
			// Envoy has gone away, possibly while the Picker waited: nobody to answer.
			return status.FromContextError(ctx.Err()).Err()
		}
		if resp != nil {
			if err := stream.Send(resp); err != nil {
				return streamError(ctx, err)
			}
		}
		if last {
			return nil
		}
	}
}

// streamError turns a stream's receive or send error into Process's result: nil when
// Envoy closed the stream, the context's status when the stream was cancelled.
func streamError(ctx context.Context, err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return err
}

// exchange is the state of one ext_proc stream. Every field is owned by the goroutine
// running Process for that stream; nothing else reads or writes them.
type exchange struct {
	server  *Server
	headers http.Header
	body    []byte
	// picked is set once Pick has been called; the Picker is asked at most once.
	picked bool
	// release is the Picker's reservation release, nil until a pick returned one;
	// releaseOnce makes sure it runs once.
	release     func()
	releaseOnce sync.Once
}

// finish releases the reservation if there is one and it has not been released yet.
func (x *exchange) finish() {
	if x.release == nil {
		return
	}
	x.releaseOnce.Do(x.release)
}

// handle returns the answer to req, or nil when req needs none, and whether the answer
// ends the exchange.
func (x *exchange) handle(ctx context.Context, req *extprocv3.ProcessingRequest) (resp *extprocv3.ProcessingResponse, last bool) {
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		x.headers = httpHeader(r.RequestHeaders.GetHeaders())
		if n, err := strconv.ParseInt(x.headers.Get("Content-Length"), 10, 64); err == nil && n > x.server.maxBodyBytes {
			return x.bodyTooLarge(ctx), true
		}
		if r.RequestHeaders.GetEndOfStream() {
			return x.pick(ctx, false)
		}
		return requestHeadersResponse(nil), false

	case *extprocv3.ProcessingRequest_RequestBody:
		if x.picked {
			return requestBodyResponse(nil), false
		}
		chunk := r.RequestBody.GetBody()
		if int64(len(x.body))+int64(len(chunk)) > x.server.maxBodyBytes {
			x.body = nil
			return x.bodyTooLarge(ctx), true
		}
		x.body = append(x.body, chunk...)
		if !r.RequestBody.GetEndOfStream() {
			// Envoy holds the request until the last chunk is answered; routing needs the
			// whole body.
			return nil, false
		}
		return x.pick(ctx, true)

	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{},
		}}, false

	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if r.ResponseHeaders.GetEndOfStream() {
			x.finish()
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{},
		}}, false

	case *extprocv3.ProcessingRequest_ResponseBody:
		if r.ResponseBody.GetEndOfStream() {
			x.finish()
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{},
		}}, false

	case *extprocv3.ProcessingRequest_ResponseTrailers:
		x.finish()
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{},
		}}, false

	default:
		// No phase set (for example a flow-control-only message): nothing to answer.
		return nil, false
	}
}

// pick asks the Picker for an endpoint and answers the message that completed the
// request: its body when inBody, else its headers.
func (x *exchange) pick(ctx context.Context, inBody bool) (*extprocv3.ProcessingResponse, bool) {
	x.picked = true
	body := x.body
	x.body = nil
	endpoint, release, err := x.server.picker.Pick(ctx, x.headers, body)
	x.release = release
	if err == nil {
		if _, _, splitErr := net.SplitHostPort(endpoint); splitErr != nil {
			err = fmt.Errorf("picker returned endpoint %q: %w", endpoint, splitErr)
		}
	}
	if err != nil {
		x.finish()
		if ctx.Err() != nil {
			return nil, true // Envoy has gone away; Process ends the stream.
		}
		return errorResponse(ctx, err), true
	}

	common := &extprocv3.CommonResponse{
		HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
			Header: &corev3.HeaderValue{Key: DestinationEndpointHeader, RawValue: []byte(endpoint)},
			// Overwrite, so that a client cannot add a destination of its own.
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}}},
		ClearRouteCache: true,
	}
	var resp *extprocv3.ProcessingResponse
	if inBody {
		resp = requestBodyResponse(common)
	} else {
		resp = requestHeadersResponse(common)
	}
	resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationEndpointNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationEndpointHeader: structpb.NewStringValue(endpoint),
		}}),
	}}
	log.FromContext(ctx).V(1).Info("Picked endpoint", "endpoint", endpoint)
	return resp, false
}

// bodyTooLarge answers a request whose body exceeds the limit.
func (x *exchange) bodyTooLarge(ctx context.Context) *extprocv3.ProcessingResponse {
	return errorResponse(ctx, &statusError{
		status:  http.StatusRequestEntityTooLarge,
		message: fmt.Sprintf("request body exceeds %d bytes", x.server.maxBodyBytes),
	})
}

func requestHeadersResponse(common *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: common},
	}}
}

func requestBodyResponse(common *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: common},
	}}
}

// httpHeader converts Envoy's header map; each entry carries its value in either Value or
// RawValue.
func httpHeader(m *corev3.HeaderMap) http.Header {
	h := make(http.Header, len(m.GetHeaders()))
	for _, hv := range m.GetHeaders() {
		v := hv.GetValue()
		if raw := hv.GetRawValue(); len(raw) > 0 {
			v = string(raw)
		}
		h.Add(hv.GetKey(), v)
	}
	return h
}

// errorResponse answers err with an immediate response: the status and message of an
// error carrying an HTTP status, else 500 with a generic message (err is logged).
func errorResponse(ctx context.Context, err error) *extprocv3.ProcessingResponse {
	code, message := http.StatusInternalServerError, "internal error while picking an endpoint"
	if se, ok := errors.AsType[httpStatusError](err); ok && se.HTTPStatus() >= 400 && se.HTTPStatus() <= 599 {
		code, message = se.HTTPStatus(), err.Error()
		log.FromContext(ctx).V(1).Info("Request rejected", "status", code, "reason", message)
	} else {
		log.FromContext(ctx).Error(err, "Endpoint pick failed")
	}

	w := newRecordedResponse()
	if hs, ok := errors.AsType[headerSetter](err); ok {
		hs.SetHeaders(w.header)
	}
	writeError(w, code, message)
	mutation := &extprocv3.HeaderMutation{}
	for key, values := range w.header {
		for _, v := range values {
			mutation.SetHeaders = append(mutation.SetHeaders, &corev3.HeaderValueOption{
				Header:       &corev3.HeaderValue{Key: strings.ToLower(key), RawValue: []byte(v)},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			})
		}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(w.status)},
			Headers: mutation,
			Body:    w.body.Bytes(),
		},
	}}
}

// httpStatusError is an error that says which HTTP status answers it.
type httpStatusError interface {
	error
	HTTPStatus() int
}

// headerSetter is an error whose answer carries headers, such as Retry-After.
type headerSetter interface {
	error
	SetHeaders(http.Header)
}

// statusError is an httpStatusError raised by the Server itself.
type statusError struct {
	status  int
	message string
}

func (e *statusError) Error() string   { return e.message }
func (e *statusError) HTTPStatus() int { return e.status }
