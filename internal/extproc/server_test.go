package extproc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-llm/switchboard/internal/extproc"
)

const endpoint = "10.0.0.7:8000"

// fakePicker records what it is asked and answers with a fixed endpoint (and fallbacks)
// or error.
type fakePicker struct {
	endpoint  string
	fallbacks []string
	err       error

	mu      sync.Mutex
	calls   int
	headers http.Header
	body    []byte
	subset  map[string]bool
	served  []string
	// answer holds the chunks of the answer's body the Server passed.
	answer []string

	released atomic.Int32
}

func (p *fakePicker) Pick(_ context.Context, req extproc.Request) (extproc.Pick, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	p.headers = req.Headers
	p.body = append([]byte(nil), req.Body...)
	p.subset = req.Subset
	if p.err != nil {
		return extproc.Pick{}, p.err
	}
	return extproc.Pick{Endpoints: append([]string{p.endpoint}, p.fallbacks...), Reservation: fakeReservation{p}}, nil
}

func (p *fakePicker) pickCalls() (int, http.Header, []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, p.headers, p.body
}

// servedCalls returns the endpoints the Server reported as served, in order.
func (p *fakePicker) servedCalls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.served)
}

// fakeReservation counts its releases and records what served on its picker.
type fakeReservation struct{ p *fakePicker }

func (r fakeReservation) Served(endpoint string) {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.p.served = append(r.p.served, endpoint)
}

func (r fakeReservation) Answer(chunk []byte) {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.p.answer = append(r.p.answer, string(chunk))
}

// answerChunks returns the chunks of the answer the Server passed, in order.
func (p *fakePicker) answerChunks() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.answer)
}

func (r fakeReservation) Release() { r.p.released.Add(1) }

// waitReleased waits until release has been called at least once, then reports the count.
func (p *fakePicker) waitReleased(t *testing.T) int32 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.released.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return p.released.Load()
}

// statusErr is a Picker error carrying an HTTP status, like the gateway's errors.
type statusErr struct {
	status int
	msg    string
	// retryAfter, if set, is the Retry-After header the error's answer carries.
	retryAfter string
}

func (e *statusErr) Error() string   { return e.msg }
func (e *statusErr) HTTPStatus() int { return e.status }
func (e *statusErr) SetHeaders(h http.Header) {
	if e.retryAfter != "" {
		h.Set("Retry-After", e.retryAfter)
	}
}

// startServer serves an extproc.Server for p on 127.0.0.1 and returns a client playing
// Envoy's part. Everything is stopped when the test ends.
func startServer(t *testing.T, p extproc.Picker, opts extproc.Options) extprocv3.ExternalProcessorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	g := extproc.NewServer(p, opts).GRPCServer()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		<-served
	})
	return extprocv3.NewExternalProcessorClient(conn)
}

// openStream opens an ext_proc stream that is cancelled when the test ends.
func openStream(t *testing.T, c extprocv3.ExternalProcessorClient) (extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.Process(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	return stream, cancel
}

// headerMap returns the header map of the names and values kv, in turn.
func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		// Envoy sends raw_value; older versions sent value. Alternate to cover both.
		hv := &corev3.HeaderValue{Key: kv[i]}
		if i%4 == 0 {
			hv.RawValue = []byte(kv[i+1])
		} else {
			hv.Value = kv[i+1]
		}
		m.Headers = append(m.Headers, hv)
	}
	return m
}

func requestHeaders(endOfStream bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: endOfStream},
	}}
}

func requestBody(body string, endOfStream bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: endOfStream},
	}}
}

func responseHeaders(endOfStream bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: endOfStream},
	}}
}

func responseBody(body string, endOfStream bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: endOfStream},
	}}
}

func send(t *testing.T, s extprocv3.ExternalProcessor_ProcessClient, reqs ...*extprocv3.ProcessingRequest) {
	t.Helper()
	for _, r := range reqs {
		if err := s.Send(r); err != nil {
			t.Fatalf("send %v: %v", r, err)
		}
	}
}

func recv(t *testing.T, s extprocv3.ExternalProcessor_ProcessClient) *extprocv3.ProcessingResponse {
	t.Helper()
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return resp
}

// expectEnd checks that the server has ended the stream.
func expectEnd(t *testing.T, s extprocv3.ExternalProcessor_ProcessClient) {
	t.Helper()
	if resp, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("recv = %v, %v; want io.EOF", resp, err)
	}
}

// checkRouted checks that common routes to endpoint and clears the route cache, and that
// resp carries the endpoint in envoy.lb dynamic metadata.
func checkRouted(t *testing.T, resp *extprocv3.ProcessingResponse, common *extprocv3.CommonResponse) {
	t.Helper()
	if common == nil {
		t.Fatalf("response %v has no common response", resp)
	}
	if !common.GetClearRouteCache() {
		t.Error("clear_route_cache = false, want true")
	}
	set := common.GetHeaderMutation().GetSetHeaders()
	if len(set) != 1 {
		t.Fatalf("set_headers = %v, want one header", set)
	}
	h := set[0]
	if h.GetHeader().GetKey() != "x-gateway-destination-endpoint" || string(h.GetHeader().GetRawValue()) != endpoint {
		t.Errorf("set header = %v, want x-gateway-destination-endpoint: %s", h.GetHeader(), endpoint)
	}
	if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
		t.Errorf("append action = %v, want OVERWRITE_IF_EXISTS_OR_ADD", h.GetAppendAction())
	}
	md := resp.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"]
	if md.GetStringValue() != endpoint {
		t.Errorf("dynamic metadata = %v, want envoy.lb/x-gateway-destination-endpoint = %s", resp.GetDynamicMetadata(), endpoint)
	}
}

// checkImmediate checks an immediate OpenAI-shaped JSON error response.
func checkImmediate(t *testing.T, resp *extprocv3.ProcessingResponse, wantStatus int, wantType, wantCode, wantMessage string) {
	t.Helper()
	ir := resp.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("response = %v, want an immediate response", resp)
	}
	if got := int(ir.GetStatus().GetCode()); got != wantStatus {
		t.Errorf("status = %d, want %d", got, wantStatus)
	}
	var contentType string
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == "content-type" {
			contentType = string(h.GetHeader().GetRawValue())
		}
	}
	if contentType != "application/json" {
		t.Errorf("content-type = %q, want application/json", contentType)
	}
	var body struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(ir.GetBody(), &body); err != nil {
		t.Fatalf("body %q is not JSON: %v", ir.GetBody(), err)
	}
	code := ""
	if body.Error.Code != nil {
		code = *body.Error.Code
	}
	if body.Error.Type != wantType || code != wantCode || body.Error.Message != wantMessage {
		t.Errorf("error = {%q %q %q}, want {%q %q %q}", body.Error.Message, body.Error.Type, code, wantMessage, wantType, wantCode)
	}
}

func TestProcessRoutesAfterWholeBodyAndReleasesAtResponseEnd(t *testing.T) {
	p := &fakePicker{endpoint: endpoint}
	stream, _ := openStream(t, startServer(t, p, extproc.Options{}))

	send(t, stream, requestHeaders(false,
		":path", "/v1/chat/completions",
		"content-type", "application/json",
		"x-request-id", "req-1",
		"x-gateway-destination-endpoint", "6.6.6.6:1"))
	if resp := recv(t, stream); resp.GetRequestHeaders() == nil || resp.GetRequestHeaders().GetResponse() != nil {
		t.Fatalf("headers answer = %v, want an empty CONTINUE", resp)
	}

	send(t, stream, requestBody(`{"model":"llama-3-8b",`, false), requestBody(`"messages":[]}`, true))
	resp := recv(t, stream)
	if resp.GetRequestBody() == nil {
		t.Fatalf("body answer = %v, want a body response", resp)
	}
	checkRouted(t, resp, resp.GetRequestBody().GetResponse())

	calls, headers, body := p.pickCalls()
	if calls != 1 {
		t.Fatalf("Pick called %d times, want 1", calls)
	}
	if string(body) != `{"model":"llama-3-8b","messages":[]}` {
		t.Errorf("Pick body = %q, want both chunks joined", body)
	}
	if headers.Get("X-Request-Id") != "req-1" || headers.Get("Content-Type") != "application/json" || headers.Get(":path") != "/v1/chat/completions" {
		t.Errorf("Pick headers = %v, want the request headers", headers)
	}

	send(t, stream, responseHeaders(false))
	if resp := recv(t, stream); resp.GetResponseHeaders() == nil {
		t.Fatalf("response headers answer = %v, want CONTINUE", resp)
	}
	send(t, stream, responseBody("data: 1\n\n", false))
	if resp := recv(t, stream); resp.GetResponseBody() == nil {
		t.Fatalf("response body answer = %v, want CONTINUE", resp)
	}
	if n := p.released.Load(); n != 0 {
		t.Fatalf("released %d times before the response ended", n)
	}
	send(t, stream, responseBody("data: [DONE]\n\n", true))
	if resp := recv(t, stream); resp.GetResponseBody() == nil {
		t.Fatalf("last response body answer = %v, want CONTINUE", resp)
	}
	if n := p.released.Load(); n != 1 {
		t.Fatalf("released %d times at the response end, want 1", n)
	}

	if err := stream.CloseSend(); err != nil {
		t.Fatalf("close send: %v", err)
	}
	expectEnd(t, stream)
	if n := p.released.Load(); n != 1 {
		t.Errorf("released %d times after the stream ended, want 1", n)
	}
}

func TestProcessPassesTheAnswerToTheReservation(t *testing.T) {
	tests := []struct {
		name string
		// status is the answer's :status; the body's chunks follow, the last ending it.
		status string
		chunks []string
		want   []string
	}{
		{"a 200 answer's chunks, in order, without the empty", "200",
			[]string{"", "data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"},
			[]string{"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"}},
		{"not an error answer's body", "503", []string{`{"error":"overloaded"}`}, nil},
		{"nothing of an answer without a body", "200", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakePicker{endpoint: endpoint}
			stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
			send(t, stream, requestHeaders(true, ":path", "/v1/models"))
			recv(t, stream)
			send(t, stream, responseHeaders(len(tt.chunks) == 0, ":status", tt.status, "content-type", "text/event-stream"))
			recv(t, stream)
			for i, chunk := range tt.chunks {
				send(t, stream, responseBody(chunk, i == len(tt.chunks)-1))
				recv(t, stream)
			}
			if n := p.waitReleased(t); n != 1 {
				t.Fatalf("released %d times, want 1", n)
			}
			if got := p.answerChunks(); !slices.Equal(got, tt.want) {
				t.Errorf("the reservation was passed %q, want %q", got, tt.want)
			}
		})
	}
}

func TestProcessReleasesWhenStreamEndsEarly(t *testing.T) {
	tests := []struct {
		name  string
		close func(extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) error
	}{
		{name: "envoy closes the stream", close: func(s extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) error {
			return s.CloseSend()
		}},
		{name: "stream cancelled", close: func(_ extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc) error {
			cancel()
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakePicker{endpoint: endpoint}
			stream, cancel := openStream(t, startServer(t, p, extproc.Options{}))
			send(t, stream, requestHeaders(false, "content-type", "application/json"))
			recv(t, stream)
			send(t, stream, requestBody(`{"model":"m"}`, true))
			resp := recv(t, stream)
			checkRouted(t, resp, resp.GetRequestBody().GetResponse())
			send(t, stream, responseHeaders(false))
			recv(t, stream)

			if err := tt.close(stream, cancel); err != nil {
				t.Fatalf("close: %v", err)
			}
			if n := p.waitReleased(t); n != 1 {
				t.Fatalf("released %d times, want 1", n)
			}
			_, _ = stream.Recv() // wait for the server to end the stream
			if n := p.released.Load(); n != 1 {
				t.Errorf("released %d times after the stream ended, want 1", n)
			}
		})
	}
}

func TestProcessAnswersPickErrors(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantStatus  int
		wantType    string
		wantCode    string
		wantMessage string
		// wantRetryAfter is the retry-after header the answer must carry, if any.
		wantRetryAfter string
	}{
		{
			name:       "no endpoint",
			err:        &statusErr{status: http.StatusServiceUnavailable, msg: "no ready endpoint serves the model"},
			wantStatus: http.StatusServiceUnavailable, wantType: "server_error", wantCode: "no_ready_endpoint",
			wantMessage: "no ready endpoint serves the model",
		},
		{
			name:       "queue full",
			err:        &statusErr{status: http.StatusTooManyRequests, msg: "request queue is full", retryAfter: "1"},
			wantStatus: http.StatusTooManyRequests, wantType: "rate_limit_error", wantCode: "queue_full",
			wantMessage: "request queue is full", wantRetryAfter: "1",
		},
		{
			name:       "wrapped unknown model",
			err:        fmt.Errorf("route: %w", &statusErr{status: http.StatusNotFound, msg: `model "x" not found`}),
			wantStatus: http.StatusNotFound, wantType: "invalid_request_error", wantCode: "model_not_found",
			wantMessage: `route: model "x" not found`,
		},
		{
			name:       "plain error",
			err:        errors.New("secret internal detail"),
			wantStatus: http.StatusInternalServerError, wantType: "server_error",
			wantMessage: "internal error while picking an endpoint",
		},
		{
			name:       "status outside 4xx and 5xx",
			err:        &statusErr{status: http.StatusOK, msg: "odd"},
			wantStatus: http.StatusInternalServerError, wantType: "server_error",
			wantMessage: "internal error while picking an endpoint",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakePicker{err: tt.err}
			stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
			send(t, stream, requestHeaders(false, "content-type", "application/json"))
			recv(t, stream)
			send(t, stream, requestBody(`{"model":"x"}`, true))
			resp := recv(t, stream)
			checkImmediate(t, resp, tt.wantStatus, tt.wantType, tt.wantCode, tt.wantMessage)
			var retryAfter string
			for _, h := range resp.GetImmediateResponse().GetHeaders().GetSetHeaders() {
				if h.GetHeader().GetKey() == "retry-after" {
					retryAfter = string(h.GetHeader().GetRawValue())
				}
			}
			if retryAfter != tt.wantRetryAfter {
				t.Errorf("retry-after = %q, want %q", retryAfter, tt.wantRetryAfter)
			}
			expectEnd(t, stream)
		})
	}
}

func TestProcessRejectsPickOutsideTheProtocol(t *testing.T) {
	tests := []struct {
		name      string
		picker    *fakePicker
		subset    []string
		wantCalls int
	}{
		{name: "not an address", picker: &fakePicker{endpoint: "not-an-address"}},
		{name: "fallback not an address", picker: &fakePicker{endpoint: endpoint, fallbacks: []string{"10.0.0.8"}}},
		{name: "duplicate endpoint", picker: &fakePicker{endpoint: endpoint, fallbacks: []string{endpoint}}},
		{name: "outside the subset", picker: &fakePicker{endpoint: endpoint, fallbacks: []string{"10.0.0.9:8000"}},
			subset: []string{endpoint}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, _ := openStream(t, startServer(t, tt.picker, extproc.Options{}))
			headers := requestHeaders(false)
			if tt.subset != nil {
				headers = withSubset(headers, tt.subset...)
			}
			send(t, stream, headers, requestBody(`{"model":"m"}`, true))
			recv(t, stream)
			checkImmediate(t, recv(t, stream), http.StatusInternalServerError, "server_error", "", "internal error while picking an endpoint")
			expectEnd(t, stream)
			if n := tt.picker.released.Load(); n != 1 {
				t.Errorf("released %d times, want 1", n)
			}
		})
	}
}

func TestProcessRejectsOversizedBody(t *testing.T) {
	tests := []struct {
		name string
		reqs []*extprocv3.ProcessingRequest
		// answers is how many CONTINUE answers precede the 413.
		answers int
	}{
		{
			name:    "body over the limit",
			reqs:    []*extprocv3.ProcessingRequest{requestHeaders(false), requestBody("0123456789", false), requestBody("0123456789", true)},
			answers: 1,
		},
		{
			name: "content-length over the limit",
			reqs: []*extprocv3.ProcessingRequest{requestHeaders(false, "content-length", "17")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakePicker{endpoint: endpoint}
			stream, _ := openStream(t, startServer(t, p, extproc.Options{MaxBodyBytes: 16}))
			send(t, stream, tt.reqs...)
			for range tt.answers {
				recv(t, stream)
			}
			checkImmediate(t, recv(t, stream), http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				"request body exceeds 16 bytes")
			expectEnd(t, stream)
			if calls, _, _ := p.pickCalls(); calls != 0 {
				t.Errorf("Pick called %d times, want 0", calls)
			}
		})
	}
}

func TestProcessBodyAtTheLimitIsPicked(t *testing.T) {
	p := &fakePicker{endpoint: endpoint}
	stream, _ := openStream(t, startServer(t, p, extproc.Options{MaxBodyBytes: 16}))
	send(t, stream, requestHeaders(false, "content-length", "16"), requestBody("01234567", false), requestBody("01234567", true))
	recv(t, stream)
	resp := recv(t, stream)
	checkRouted(t, resp, resp.GetRequestBody().GetResponse())
}

// TestProcessBufferedBodyBeyondGRPCDefault sends, as Envoy's BUFFERED mode does, a body
// larger than gRPC's default 4 MiB message limit in one message.
func TestProcessBufferedBodyBeyondGRPCDefault(t *testing.T) {
	p := &fakePicker{endpoint: endpoint}
	const size = 6 << 20
	stream, _ := openStream(t, startServer(t, p, extproc.Options{MaxBodyBytes: 8 << 20}))
	send(t, stream, requestHeaders(false, "content-length", strconv.Itoa(size)), requestBody(strings.Repeat("x", size), true))
	recv(t, stream)
	resp := recv(t, stream)
	checkRouted(t, resp, resp.GetRequestBody().GetResponse())
}

func TestProcessHeadersOnlyRequest(t *testing.T) {
	t.Run("picker rejects the empty body", func(t *testing.T) {
		p := &fakePicker{err: &statusErr{status: http.StatusBadRequest, msg: "request body is empty"}}
		stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
		send(t, stream, requestHeaders(true, ":method", "POST"))
		checkImmediate(t, recv(t, stream), http.StatusBadRequest, "invalid_request_error", "", "request body is empty")
		expectEnd(t, stream)
		calls, _, body := p.pickCalls()
		if calls != 1 || len(body) != 0 {
			t.Errorf("Pick called %d times with body %q, want once with an empty body", calls, body)
		}
	})
	t.Run("picker routes it", func(t *testing.T) {
		p := &fakePicker{endpoint: endpoint}
		stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
		send(t, stream, requestHeaders(true, ":method", "GET"))
		resp := recv(t, stream)
		checkRouted(t, resp, resp.GetRequestHeaders().GetResponse())
		send(t, stream, responseHeaders(true))
		recv(t, stream)
		if n := p.released.Load(); n != 1 {
			t.Errorf("released %d times after a body-less response, want 1", n)
		}
	})
}

func TestProcessContinuesTrailersAndIgnoresEmptyMessages(t *testing.T) {
	p := &fakePicker{endpoint: endpoint}
	stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
	send(t, stream, requestHeaders(false), requestBody(`{"model":"m"}`, true))
	recv(t, stream)
	recv(t, stream)
	send(t, stream,
		&extprocv3.ProcessingRequest{}, // no phase: needs no answer
		&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
			ResponseTrailers: &extprocv3.HttpTrailers{},
		}})
	if resp := recv(t, stream); resp.GetResponseTrailers() == nil {
		t.Fatalf("trailers answer = %v, want CONTINUE", resp)
	}
	if n := p.released.Load(); n != 1 {
		t.Errorf("released %d times after response trailers, want 1", n)
	}
}

func TestProcessObservabilityModeEndsStream(t *testing.T) {
	p := &fakePicker{endpoint: endpoint}
	stream, _ := openStream(t, startServer(t, p, extproc.Options{}))
	req := requestHeaders(true)
	req.ObservabilityMode = true
	send(t, stream, req)
	expectEnd(t, stream)
	if calls, _, _ := p.pickCalls(); calls != 0 {
		t.Errorf("Pick called %d times, want 0", calls)
	}
}

// blockingPicker waits in Pick until its context ends.
type blockingPicker struct {
	entered chan struct{}
}

func (p *blockingPicker) Pick(ctx context.Context, _ extproc.Request) (extproc.Pick, error) {
	close(p.entered)
	<-ctx.Done()
	return extproc.Pick{}, ctx.Err()
}

func TestProcessStopsWaitingPickerWhenStreamEnds(t *testing.T) {
	p := &blockingPicker{entered: make(chan struct{})}
	stream, cancel := openStream(t, startServer(t, p, extproc.Options{}))
	send(t, stream, requestHeaders(false), requestBody(`{"model":"m"}`, true))
	recv(t, stream)
	select {
	case <-p.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("Pick was not called")
	}
	cancel()
	if _, err := stream.Recv(); err == nil {
		t.Fatal("recv succeeded after the stream was cancelled")
	}
	// goleak in TestMain checks that the handler and Pick have returned.
}
