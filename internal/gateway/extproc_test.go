package gateway_test

import (
	"context"
	"net"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-llm/switchboard/internal/extproc"
	"github.com/switchboard-llm/switchboard/internal/gateway"
)

// pickOverExtProc serves g's endpoint picker for scope over ext_proc on loopback and
// plays Envoy's part for one request with body: it returns the primary destination the
// picker set (empty when it answered immediately), the immediate response's status, and a
// done func that ends the response (which releases the reservation).
func pickOverExtProc(t *testing.T, g *gateway.Gateway, scope gateway.PickScope, body []byte) (destination string, status int, done func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	extproc.NewServer(g.Picker(scope), extproc.Options{}).Register(srv)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	headers := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":path", RawValue: []byte("/v1/chat/completions")},
		{Key: "content-type", RawValue: []byte("application/json")},
	}}
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
	} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // the headers' CONTINUE, then the body's routing answer
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range resp.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
			if h.GetHeader().GetKey() == extproc.DestinationEndpointHeader {
				destination, _, _ = strings.Cut(string(h.GetHeader().GetRawValue()), ",")
			}
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			return "", int(ir.GetStatus().GetCode()), func() {}
		}
	}
	return destination, 0, func() {
		_ = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{EndOfStream: true},
		}})
		_, _ = stream.Recv()
		_ = stream.CloseSend()
	}
}
