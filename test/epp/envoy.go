package epp

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names of the protocol, written out from its specification.
const (
	destinationHeader    = "x-gateway-destination-endpoint"
	destinationNamespace = "envoy.lb"
	servedKey            = "x-gateway-destination-endpoint-served"
	subsetNamespace      = "envoy.lb.subset_hint"
	subsetKey            = "x-gateway-destination-endpoint-subset"
)

// Body modes the suite plays.
const (
	buffered   = extprocfilterv3.ProcessingMode_BUFFERED
	fullDuplex = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
)

// exchange is one ext_proc stream, that is one HTTP request, with Envoy's side played by
// the suite.
type exchange struct {
	t      *testing.T
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	mode   extprocfilterv3.ProcessingMode_BodySendMode
}

// outcome is what the picker answered a request with.
type outcome struct {
	// header and metadata are the destination the picker set in the request header and
	// in dynamic metadata; empty when it answered immediately.
	header, metadata string
	// status is the immediate response's HTTP status, 0 when the request was routed.
	status int
	// body is the request body the picker streamed back (FULL_DUPLEX_STREAMED mode).
	body string
}

// endpoints returns the routed endpoints in order, from the header.
func (o outcome) endpoints() []string {
	if o.header == "" {
		return nil
	}
	eps := strings.Split(o.header, ",")
	for i := range eps {
		eps[i] = strings.TrimSpace(eps[i])
	}
	return eps
}

// open opens an ext_proc stream on c in mode, which ends with the test.
func (s *suite) open(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode) *exchange {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := s.client.Process(ctx)
	if err != nil {
		t.Fatalf("open ext_proc stream: %v", err)
	}
	return &exchange{t: t, stream: stream, cancel: cancel, mode: mode}
}

// request sends a request with body to the picker, with subset as the subset hint when
// not nil, and returns its answer.
func (x *exchange) request(body string, subset []string) outcome {
	x.t.Helper()
	headers := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":method", "POST", ":path", "/v1/chat/completions", ":authority", "epp-suite",
				"content-type", "application/json"),
		}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: x.mode, ResponseBodyMode: x.mode},
	}
	if subset != nil {
		values := make([]*structpb.Value, len(subset))
		for i, e := range subset {
			values[i] = structpb.NewStringValue(e)
		}
		headers.MetadataContext = metadata(subsetNamespace, subsetKey, structpb.NewListValue(&structpb.ListValue{Values: values}))
	}
	x.send(headers)
	if x.mode == buffered {
		// Envoy waits for the headers' answer before it sends the buffered body.
		if o, done := x.answer(x.recv()); done {
			return o
		}
		x.send(requestBody(body, true))
		o, done := x.answer(x.recv())
		if !done {
			x.t.Fatal("the picker answered the whole body without routing or rejecting the request")
		}
		return o
	}
	// FULL_DUPLEX_STREAMED: the body follows at once, in two chunks.
	half := len(body) / 2
	x.send(requestBody(body[:half], false))
	x.send(requestBody(body[half:], true))
	o, done := x.answer(x.recv())
	if !done {
		x.t.Fatal("the picker's first answer in FULL_DUPLEX_STREAMED mode neither routes nor rejects the request")
	}
	for o.status == 0 {
		sr := x.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			x.t.Fatal("the picker answered the body in FULL_DUPLEX_STREAMED mode without a streamed response")
		}
		o.body += string(sr.GetBody())
		if sr.GetEndOfStream() {
			break
		}
	}
	return o
}

// answer reads a request-path answer: the destination it sets or its immediate status,
// and whether it settles the request.
func (x *exchange) answer(resp *extprocv3.ProcessingResponse) (outcome, bool) {
	if ir := resp.GetImmediateResponse(); ir != nil {
		return outcome{status: int(ir.GetStatus().GetCode())}, true
	}
	var common *extprocv3.CommonResponse
	switch {
	case resp.GetRequestHeaders() != nil:
		common = resp.GetRequestHeaders().GetResponse()
	case resp.GetRequestBody() != nil:
		common = resp.GetRequestBody().GetResponse()
	default:
		x.t.Fatalf("answer %v is not for the request headers or body", resp)
	}
	var o outcome
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		if strings.EqualFold(h.GetHeader().GetKey(), destinationHeader) {
			o.header = string(h.GetHeader().GetRawValue())
			if o.header == "" {
				o.header = h.GetHeader().GetValue()
			}
		}
	}
	md := resp.GetDynamicMetadata().GetFields()[destinationNamespace].GetStructValue()
	o.metadata = md.GetFields()[destinationHeader].GetStringValue()
	return o, o.header != "" || o.metadata != ""
}

// respond plays the engine's whole response through Envoy, telling the picker that
// served served it (when not empty).
func (x *exchange) respond(served string) {
	x.t.Helper()
	x.respondHeaders(served)
	x.respondBody()
}

// respondHeaders plays the response headers, telling the picker that served served the
// request (when not empty), and checks that they are answered.
func (x *exchange) respondHeaders(served string) {
	x.t.Helper()
	headers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", "200", "content-type", "text/event-stream")},
	}}
	if served != "" {
		headers.MetadataContext = metadata(destinationNamespace, servedKey, structpb.NewStringValue(served))
	}
	x.send(headers)
	if resp := x.recv(); resp.GetResponseHeaders() == nil {
		x.t.Fatalf("answer to the response headers = %v", resp)
	}
}

// respondBody plays the whole response body and checks that it is answered (passed back
// in FULL_DUPLEX_STREAMED mode).
func (x *exchange) respondBody() {
	x.t.Helper()
	x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte("data: [DONE]\n\n"), EndOfStream: true},
	}})
	resp := x.recv()
	if resp.GetResponseBody() == nil {
		x.t.Fatalf("answer to the response body = %v", resp)
	}
	if sr := resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); x.mode == fullDuplex &&
		(string(sr.GetBody()) != "data: [DONE]\n\n" || !sr.GetEndOfStream()) {
		x.t.Errorf("response body in FULL_DUPLEX_STREAMED mode passed back as %v, want the chunk and its end", sr)
	}
}

// close ends the stream as Envoy does after a response and checks that the picker ends
// it too.
func (x *exchange) close() {
	x.t.Helper()
	if err := x.stream.CloseSend(); err != nil {
		x.t.Fatalf("close the stream: %v", err)
	}
	if resp, err := x.stream.Recv(); !errors.Is(err, io.EOF) {
		x.t.Errorf("after Envoy closed the stream: %v, %v; want the picker to end it", resp, err)
	}
}

func (x *exchange) send(req *extprocv3.ProcessingRequest) {
	x.t.Helper()
	if err := x.stream.Send(req); err != nil {
		x.t.Fatalf("send to the picker: %v", err)
	}
}

func (x *exchange) recv() *extprocv3.ProcessingResponse {
	x.t.Helper()
	resp, err := x.stream.Recv()
	if err != nil {
		x.t.Fatalf("receive from the picker: %v", err)
	}
	return resp
}

func requestBody(body string, endOfStream bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: endOfStream},
	}}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func metadata(namespace, key string, value *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		namespace: {Fields: map[string]*structpb.Value{key: value}},
	}}
}
