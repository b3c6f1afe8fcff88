package extproc

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Names of the Endpoint Picker Protocol (v1.0.0): headers, metadata namespaces and keys.
const (
	// DestinationEndpointHeader is the request header, and the dynamic-metadata key, through
	// which the Server tells the data plane the picked endpoints: "ip:port", the primary
	// first, then the fallbacks, comma-separated.
	DestinationEndpointHeader = "x-gateway-destination-endpoint"
	// DestinationEndpointNamespace is the metadata namespace that holds
	// DestinationEndpointHeader in the Server's answers and DestinationEndpointServedKey in
	// the data plane's response messages.
	DestinationEndpointNamespace = "envoy.lb"
	// DestinationEndpointServedKey is the metadata key through which the data plane tells
	// which endpoint ("ip:port") served the request.
	DestinationEndpointServedKey = "x-gateway-destination-endpoint-served"
	// SubsetHintNamespace is the metadata namespace that holds SubsetHintKey in the data
	// plane's request messages.
	SubsetHintNamespace = "envoy.lb.subset_hint"
	// SubsetHintKey is the metadata key of the list of "ip:port" endpoints that the picker
	// must pick from.
	SubsetHintKey = "x-gateway-destination-endpoint-subset"
)

// DefaultMaxBodyBytes is the request body limit used when Options.MaxBodyBytes is not set.
const DefaultMaxBodyBytes int64 = 8 << 20

// Request is what the Picker is told about one HTTP request.
type Request struct {
	// Headers are the request headers, with Envoy's pseudo-headers such as ":path".
	Headers http.Header
	// Body is the whole request body.
	Body []byte
	// Subset, when not nil, is the set of "ip:port" endpoints the data plane allows for
	// this request (the subset hint): the Picker MUST pick only among them. It is never
	// empty: the Server answers an empty hint with 503 itself.
	Subset map[string]bool
}

// Allows reports whether the request may go to endpoint: always without a subset hint.
func (r Request) Allows(endpoint string) bool { return r.Subset == nil || r.Subset[endpoint] }

// Pick is a Picker's choice for one request.
type Pick struct {
	// Endpoints are "ip:port", distinct: the primary first, then the fallbacks in the
	// order the data plane should try them on retry. At least one.
	Endpoints []string
	// Reservation, if not nil, is the load the request puts on its endpoint.
	Reservation Reservation
}

// Reservation is the load a picked request holds. The Server calls its methods from the
// goroutine serving the request's stream, never concurrently: Served at most once and
// Answer any number of times, then Release exactly once.
type Reservation interface {
	// Served tells which of the Pick's endpoints the data plane reports having served
	// the request, which may be a fallback.
	Served(endpoint string)
	// Answer passes the next chunk, never empty, of a 200 answer's body as it reaches
	// the data plane, which sends the body only in a response body mode other than NONE.
	// The first chunk of an answer that streams comes with the engine's first token. The
	// chunk is only valid until Answer returns.
	Answer(chunk []byte)
	// Release ends the reservation: the response ended or the stream did.
	Release()
}

// Picker chooses and reserves endpoints for requests.
type Picker interface {
	// Pick chooses and reserves endpoints for req; it should return when ctx ends.
	//
	// An error may implement interface{ HTTPStatus() int }; its status (4xx or 5xx) and
	// message are shown to the client: the protocol asks for 503 when no endpoint is
	// ready or eligible and 429 when the request is shed. Any other error is answered
	// with 500 and a generic message. A Reservation returned with an error is released
	// at once.
	Pick(ctx context.Context, req Request) (Pick, error)
}

// Options configures a Server.
type Options struct {
	// MaxBodyBytes bounds the request body the Server buffers before picking; a request
	// whose Content-Length or body exceeds it is answered with 413 and never reaches the
	// Picker. Zero or negative means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Ready are the conditions of the Server's readiness, such as the Picker's cache
	// having synced or this replica leading: each blocks until it holds or ctx ends,
	// returning ctx's error then. Until every one has returned nil, Serve reports the
	// readiness and ExternalProcessor health services NOT_SERVING. None means ready at
	// once.
	Ready []func(ctx context.Context) error
}

// Server is an Envoy ext_proc server that routes each request to the endpoints its Picker
// chooses. One ext_proc stream carries one HTTP request. A Server is safe for concurrent
// streams; it keeps no state between them.
type Server struct {
	picker       Picker
	maxBodyBytes int64
	ready        []func(ctx context.Context) error
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// NewServer returns a Server that asks p for endpoints.
func NewServer(p Picker, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return &Server{picker: p, maxBodyBytes: opts.MaxBodyBytes, ready: opts.Ready}
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

// Process serves one ext_proc stream, that is one HTTP request, in the body mode the
// data plane announces in its first message's protocol_config (BUFFERED when it says
// nothing):
//
//   - the subset hint of the request's metadata restricts the Picker; an empty one is
//     answered 503 without asking it;
//   - the request body is buffered (up to MaxBodyBytes) until its end; then the Server
//     picks and sets DestinationEndpointHeader, clears the route cache and sets the same
//     value in dynamic metadata under DestinationEndpointNamespace. In BUFFERED mode
//     this answers the request body (or the headers of a body-less request; earlier
//     request headers get CONTINUE); in FULL_DUPLEX_STREAMED mode it answers the held
//     request headers, followed by the buffered body streamed back;
//   - a failed pick or an oversized body is answered with an immediate OpenAI-shaped
//     JSON error response, after which the Server ends the stream;
//   - response messages are answered with CONTINUE (in FULL_DUPLEX_STREAMED mode body
//     chunks are passed back); the first DestinationEndpointServedKey in their metadata
//     that names a picked endpoint is told to the Reservation, and the end of the
//     response releases it.
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
		resps, last := x.handle(ctx, req)
		if ctx.Err() != nil {
			// Envoy has gone away, possibly while the Picker waited: nobody to answer.
			return status.FromContextError(ctx.Err()).Err()
		}
		for _, resp := range resps {
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
