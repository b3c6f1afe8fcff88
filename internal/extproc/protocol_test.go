package extproc_test

import (
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchboard-llm/switchboard/internal/extproc"
)

// withMetadata adds value under namespace/key to req's metadata context.
func withMetadata(req *extprocv3.ProcessingRequest, namespace, key string, value *structpb.Value) *extprocv3.ProcessingRequest {
	if req.MetadataContext == nil {
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	}
	ns := req.MetadataContext.FilterMetadata[namespace]
	if ns == nil {
		ns = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		req.MetadataContext.FilterMetadata[namespace] = ns
	}
	ns.Fields[key] = value
	return req
}

// withSubset adds the subset hint endpoints to req.
func withSubset(req *extprocv3.ProcessingRequest, endpoints ...string) *extprocv3.ProcessingRequest {
	values := make([]*structpb.Value, len(endpoints))
	for i, e := range endpoints {
		values[i] = structpb.NewStringValue(e)
	}
	return withMetadata(req, extproc.SubsetHintNamespace, extproc.SubsetHintKey, structpb.NewListValue(&structpb.ListValue{Values: values}))
}

// withServed adds the served endpoint to req.
func withServed(req *extprocv3.ProcessingRequest, endpoint string) *extprocv3.ProcessingRequest {
	return withMetadata(req, extproc.DestinationEndpointNamespace, extproc.DestinationEndpointServedKey, structpb.NewStringValue(endpoint))
}

// withBodyModes sets req's protocol_config, as Envoy does on a stream's first message.
func withBodyModes(req *extprocv3.ProcessingRequest, request, response extprocfilterv3.ProcessingMode_BodySendMode) *extprocv3.ProcessingRequest {
	req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: request, ResponseBodyMode: response}
	return req
}

// destination returns the destination header a routing answer sets and its envoy.lb
// dynamic metadata value.
func destination(resp *extprocv3.ProcessingResponse, common *extprocv3.CommonResponse) (header, metadata string) {
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == extproc.DestinationEndpointHeader {
			header = string(h.GetHeader().GetRawValue())
		}
	}
	md := resp.GetDynamicMetadata().GetFields()[extproc.DestinationEndpointNamespace].GetStructValue()
	return header, md.GetFields()[extproc.DestinationEndpointHeader].GetStringValue()
}

func TestProcessPassesSubsetHint(t *testing.T) {
	p := &fakePicker{endpoint: endpoint}
	stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
	send(t, stream, withSubset(requestHeaders(false), endpoint, "10.0.0.8:8000"), requestBody(`{"model":"m"}`, true))
	recv(t, stream)
	resp := recv(t, stream)
	checkRouted(t, resp, resp.GetRequestBody().GetResponse())
	p.mu.Lock()
	defer p.mu.Unlock()
	if want := map[string]bool{endpoint: true, "10.0.0.8:8000": true}; !maps.Equal(p.subset, want) {
		t.Errorf("Pick subset = %v, want %v", p.subset, want)
	}
}

func TestProcessWithoutSubsetHintPassesNone(t *testing.T) {
	p := &fakePicker{endpoint: endpoint}
	stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
	send(t, stream, requestHeaders(false), requestBody(`{"model":"m"}`, true))
	recv(t, stream)
	recv(t, stream)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subset != nil {
		t.Errorf("Pick subset = %v, want nil", p.subset)
	}
}

func TestProcessAnswersEmptySubsetWith503(t *testing.T) {
	p := &fakePicker{endpoint: endpoint}
	stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
	send(t, stream, withSubset(requestHeaders(false)), requestBody(`{"model":"m"}`, true))
	recv(t, stream)
	checkImmediate(t, recv(t, stream), http.StatusServiceUnavailable, "server_error", "no_ready_endpoint",
		"the request's endpoint subset is empty")
	expectEnd(t, stream)
	if calls, _, _ := p.pickCalls(); calls != 0 {
		t.Errorf("Pick called %d times, want 0", calls)
	}
}

func TestProcessSendsFallbacksInHeaderAndMetadata(t *testing.T) {
	p := &fakePicker{endpoint: endpoint, fallbacks: []string{"10.0.0.8:8000", "10.0.0.9:8000"}}
	stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
	send(t, stream, requestHeaders(false), requestBody(`{"model":"m"}`, true))
	recv(t, stream)
	resp := recv(t, stream)
	header, metadata := destination(resp, resp.GetRequestBody().GetResponse())
	if want := endpoint + ",10.0.0.8:8000,10.0.0.9:8000"; header != want || metadata != want {
		t.Errorf("destination header %q, metadata %q; want both %q", header, metadata, want)
	}
}

func TestProcessTellsServedEndpoint(t *testing.T) {
	const fallback = "10.0.0.8:8000"
	tests := []struct {
		name string
		// served are the endpoints that the response headers and the response body name,
		// "" for none.
		served [2]string
		want   []string
	}{
		{name: "fallback served", served: [2]string{fallback, endpoint}, want: []string{fallback}},
		{name: "primary served", served: [2]string{endpoint, ""}, want: []string{endpoint}},
		{name: "told with the body", served: [2]string{"", fallback}, want: []string{fallback}},
		{name: "no report", served: [2]string{"", ""}},
		{name: "an endpoint never picked is ignored", served: [2]string{"10.9.9.9:1", fallback}, want: []string{fallback}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakePicker{endpoint: endpoint, fallbacks: []string{fallback}}
			stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
			send(t, stream, requestHeaders(false), requestBody(`{"model":"m"}`, true))
			recv(t, stream)
			recv(t, stream)
			for i, req := range []*extprocv3.ProcessingRequest{responseHeaders(false), responseBody("x", true)} {
				if served := tt.served[i]; served != "" {
					req = withServed(req, served)
				}
				send(t, stream, req)
				recv(t, stream)
			}
			if got := p.servedCalls(); !slices.Equal(got, tt.want) {
				t.Errorf("Served calls = %v, want %v", got, tt.want)
			}
			if n := p.released.Load(); n != 1 {
				t.Errorf("released %d times, want 1", n)
			}
		})
	}
}

func TestProcessFullDuplexStreamed(t *testing.T) {
	const fd = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	big := `{"model":"m","prompt":"` + strings.Repeat("x", 100<<10) + `"}`
	tests := []struct {
		name string
		// chunks of the request body; trailers end it when set, else the last chunk does.
		chunks   []string
		trailers bool
	}{
		{name: "body ends the request", chunks: []string{`{"model":`, `"m"}`}},
		{name: "trailers end the request", chunks: []string{`{"model":"m"}`}, trailers: true},
		{name: "body larger than a streamed chunk", chunks: []string{big}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakePicker{endpoint: endpoint}
			stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
			send(t, stream, withBodyModes(requestHeaders(false, ":path", "/v1/completions"), fd, fd))
			for i, c := range tt.chunks {
				send(t, stream, requestBody(c, i == len(tt.chunks)-1 && !tt.trailers))
			}
			if tt.trailers {
				send(t, stream, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
					RequestTrailers: &extprocv3.HttpTrailers{}}})
			}
			// The held headers are answered first, with the route.
			resp := recv(t, stream)
			if resp.GetRequestHeaders() == nil {
				t.Fatalf("first answer = %v, want the request headers' answer", resp)
			}
			checkRouted(t, resp, resp.GetRequestHeaders().GetResponse())
			// Then the body, streamed back whole.
			want := strings.Join(tt.chunks, "")
			var body strings.Builder
			for body.Len() < len(want) {
				sr := recv(t, stream).GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
				if sr == nil {
					t.Fatal("body answer carries no streamed response")
				}
				body.Write(sr.GetBody())
				if wantEnd := body.Len() == len(want) && !tt.trailers; sr.GetEndOfStream() != wantEnd {
					t.Fatalf("streamed body end_of_stream = %v after %d bytes, want %v", sr.GetEndOfStream(), body.Len(), wantEnd)
				}
			}
			if body.String() != want {
				t.Errorf("streamed body differs from the request's")
			}
			if tt.trailers {
				if resp := recv(t, stream); resp.GetRequestTrailers() == nil {
					t.Fatalf("answer = %v, want the request trailers' answer", resp)
				}
			}
			// The response body is passed back chunk by chunk.
			send(t, stream, responseHeaders(false))
			recv(t, stream)
			send(t, stream, responseBody("data: 1\n\n", true))
			sr := recv(t, stream).GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if string(sr.GetBody()) != "data: 1\n\n" || !sr.GetEndOfStream() {
				t.Errorf("response body answer = %v, want the chunk passed back with its end", sr)
			}
			if n := p.released.Load(); n != 1 {
				t.Errorf("released %d times at the response end, want 1", n)
			}
		})
	}
}

func TestProcessBufferedModePicksOnTheBodyMessage(t *testing.T) {
	p := &fakePicker{endpoint: endpoint}
	stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
	const buffered = extprocfilterv3.ProcessingMode_BUFFERED
	// Trailers follow, so the one body message does not end the stream.
	send(t, stream, withBodyModes(requestHeaders(false), buffered, extprocfilterv3.ProcessingMode_NONE), requestBody(`{"model":"m"}`, false))
	recv(t, stream)
	resp := recv(t, stream)
	checkRouted(t, resp, resp.GetRequestBody().GetResponse())
}

func TestServeHealth(t *testing.T) {
	synced, elected := make(chan struct{}), make(chan struct{})
	waitFor := func(ch chan struct{}) func(context.Context) error {
		return func(ctx context.Context) error {
			select {
			case <-ch:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	srv := extproc.NewServer(&fakePicker{endpoint: endpoint}, extproc.Options{Ready: []func(context.Context) error{
		waitFor(synced), waitFor(elected),
	}})
	ln, err := net.Listen("tcp", "127.0.0.100:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func(service string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("check %q: %v", service, err)
		}
		if resp.GetStatus() != want {
			t.Errorf("%q = %v, want %v", service, resp.GetStatus(), want)
		}
	}
	const extProc = "envoy.service.ext_proc.v3.ExternalProcessor"
	check("liveness", healthpb.HealthCheckResponse_SERVING)
	check("readiness", healthpb.HealthCheckResponse_NOT_SERVING)
	check(extProc, healthpb.HealthCheckResponse_NOT_SERVING)

	close(elected)
	check("readiness", healthpb.HealthCheckResponse_NOT_SERVING) // not synced yet
	close(synced)
	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("watch readiness: %v", err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	check("liveness", healthpb.HealthCheckResponse_SERVING)
	check(extProc, healthpb.HealthCheckResponse_SERVING)
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "no-such-service"}); status.Code(err) != codes.NotFound {
		t.Errorf("check of an unknown service: %v, want NotFound", err)
	}
}
