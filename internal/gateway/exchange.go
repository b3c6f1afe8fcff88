package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/httpfilter"
	"github.com/switchboard-llm/switchboard/internal/openai"
	"github.com/switchboard-llm/switchboard/internal/outlier"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// exchange is one client request on its way through a matched rule: the choice of
// backend and endpoint, the upstream round trips (a first one and retries) and the relay
// of the response. It lives on the handler's goroutine.
type exchange struct {
	g       *Gateway
	w       http.ResponseWriter
	r       *http.Request
	matched routetable.Matched
	start   time.Time
	o       *outcome
	// retries is how many further endpoints may be tried after connection failures and
	// 5xx answers.
	retries int
	// outlier is the outlier detection in force: the policy's, or the defaults.
	outlier outlier.Config

	// Set for inference rules: the parsed request, its model and the policy's router.
	req      openai.Request
	model    *cache.Model
	router   routing.Router
	strategy v1alpha1.Strategy
	// body is the buffered request body; nil when a plain request streams its body.
	body []byte
	// bodyBuf holds body, from bodyBuffers; bodyShared is whether something that may
	// outlive the exchange (a mirror, http.Transport) was given body, which then is not
	// reused.
	bodyBuf    *[]byte
	bodyShared bool
	// stream is a plain request's streamed body.
	stream *onceBody
}

// serveInference routes a request on a rule with a RoutingPolicy filter: by the model
// its OpenAI-compatible body names, with the policy's strategy.
func (x *exchange) serveInference(policy *v1alpha1.RoutingPolicy) {
	body, ok := x.readBody()
	if !ok {
		return
	}
	x.body = body
	// The router does not depend on the body, so it is picked before the body is
	// parsed, and the prompt's text is built only if it reads it. Its error is answered
	// after the body's and the model's, as those are the request's own.
	router, strategy, routerErr := x.g.router(policy, x.r.Header.Get(HeaderStrategy))
	req, err := parseRequest(x.r.URL.Path, x.r.Header.Get("Content-Type"), body, promptMode(router))
	if err != nil {
		x.o.fail(x.w, x.r, err)
		return
	}
	x.req = req
	model, ok := x.g.view.Model(req.Model)
	if !ok {
		x.o.fail(x.w, x.r, errModelNotFound(req.Model))
		return
	}
	x.model = model
	x.o.model = model.Name // only served names: clients cannot grow the label set
	if routerErr != nil {
		if e, ok := errors.AsType[*Error](routerErr); ok { // the request's own error
			x.o.fail(x.w, x.r, e)
			return
		}
		x.o.fail(x.w, x.r, errInvalidFilter(fmt.Sprintf("RoutingPolicy %s/%s: %v", policy.Namespace, policy.Name, routerErr)))
		return
	}
	x.router, x.strategy = router, strategy
	x.proxy()
}

// servePlain proxies a request on a rule without a RoutingPolicy filter unchanged to a
// ready pod of its backends, balanced by least request. The body is streamed, not
// parsed, unless a RequestMirror needs a copy.
func (x *exchange) servePlain() {
	x.router, x.strategy = x.g.plain, v1alpha1.StrategyLeastRequest
	if len(x.matched.Rule.Mirrors) > 0 {
		body, ok := x.readBody()
		if !ok {
			return
		}
		x.body = body
	} else {
		x.stream = &onceBody{r: x.r.Body, left: x.r.ContentLength}
	}
	x.proxy()
}

// proxy picks a backend by weight and an endpoint of it, sends the request and relays
// the response, trying other endpoints, up to x.retries more, after connection failures
// and answers that nothing was sent of yet and another endpoint may serve: a 5xx, or the
// engine's 404 for a model it no longer serves. Every round trip's outcome feeds the
// gateway's outlier detection, and ejected endpoints are left out of the candidates.
// When no other endpoint can be tried, the last 5xx answer is relayed as is.
func (x *exchange) proxy() {
	rule := x.matched.Rule
	backends := newBackendChoice(rule, x.g.opts.Random)
	var exclude map[*cache.Pod]bool
	var lastFailure *Error // why the last endpoint tried did not serve, if any
	var kept *answer       // the last endpoint's 5xx answer, relayed if no other serves
	defer func() { kept.discard() }()
	mirrored := false
	for attempt := 0; ; {
		b, err := backends.next()
		if err != nil {
			if kept != nil {
				x.relayAnswer(kept)
				return
			}
			x.o.fail(x.w, x.r, x.noBackendLeft(err, lastFailure))
			return
		}
		backend := rule.Backends[b]
		svc, cands := x.g.candidates(backend, x.model, exclude)
		if healthy := x.g.outliers.Filter(cands.Pods, x.outlier); len(healthy) < cands.Len() {
			cands = cache.NewPodSet(healthy)
		}
		if cands.Len() == 0 {
			backends.skip(b) // its share goes to the backends that can serve
			continue
		}
		target, err := x.route(cands)
		if err != nil {
			if kept != nil && x.r.Context().Err() == nil {
				x.relayAnswer(kept)
				return
			}
			x.o.fail(x.w, x.r, err)
			return
		}
		kept.discard()
		kept = nil
		x.o.pod = target.Pod
		if attempt == 0 {
			x.g.metrics.overhead.Observe(since(x.start))
		}
		port, _ := svc.TargetPort(backend.Port, target.Pod)
		if !mirrored {
			mirrored = true
			x.g.mirror(x.r, rule, x.matched.Prefix, x.body)
		}
		resp, err := x.send(x.roundTripper(svc, backend.Port), target.Pod, port, backend.Filters)
		x.observe(target.Pod, resp, err)
		retry := attempt < x.retries && x.r.Context().Err() == nil
		if err == nil && !(retry && x.retryableAnswer(resp)) {
			x.relayAnswer(&answer{target, resp, backend.Filters})
			return
		}
		switch {
		case err != nil:
			target.Release(0)
			lastFailure = upstreamError(target.Pod, err)
			if !x.retryable(err) || !retry {
				x.o.fail(x.w, x.r, lastFailure)
				return
			}
		case resp.StatusCode >= http.StatusInternalServerError:
			kept = &answer{target, resp, backend.Filters} // relayed if no other endpoint serves
		default:
			target.Release(0)
			_ = resp.Body.Close() // the engine no longer serves the model: try another
			lastFailure = errModelNotFound(x.req.Model)
		}
		attempt++
		x.g.metrics.retries.Inc()
		if exclude == nil {
			exclude = make(map[*cache.Pod]bool)
		}
		exclude[target.Pod] = true
		backends.reset() // the backend may have other endpoints left
	}
}

// answer is an endpoint's response whose headers arrived, with its reservation and
// the filters of the backend it came through.
type answer struct {
	target  *routing.Target
	resp    *http.Response
	filters *httpfilter.Chain
}

// discard closes an answer that is not relayed and releases its reservation.
func (a *answer) discard() {
	if a == nil || a.resp == nil {
		return
	}
	_ = a.resp.Body.Close()
	a.target.Release(0)
	a.resp = nil
}

// relayAnswer relays a to the client and records its endpoint and status.
func (x *exchange) relayAnswer(a *answer) {
	x.o.pod = a.target.Pod
	x.o.status = a.resp.StatusCode
	resp := a.resp
	a.resp = nil // relay releases it
	x.relay(a.target, resp, a.filters)
}

// observe reports a round trip's outcome to the outlier detection: a failed round trip
// or a 5xx answer is a failure of pod, any other answer a success. A round trip the
// client abandoned says nothing about the pod.
func (x *exchange) observe(pod *cache.Pod, resp *http.Response, err error) {
	switch {
	case err != nil && x.r.Context().Err() != nil:
	case err != nil || resp.StatusCode >= http.StatusInternalServerError:
		x.g.outliers.Failure(&pod.Endpoint, x.outlier)
	default:
		x.g.outliers.Success(&pod.Endpoint)
	}
}

// retryableAnswer reports whether resp, of which nothing was sent to the client yet, may
// be given up for another endpoint: a 5xx, when a streamed body is still unread, or the
// engine's 404 for a model it does not serve.
func (x *exchange) retryableAnswer(resp *http.Response) bool {
	if resp.StatusCode >= http.StatusInternalServerError {
		return x.stream == nil || !x.stream.started()
	}
	return x.lacksModel(resp)
}

// noBackendLeft is the client's error when no backend has a candidate left: why the
// last endpoint tried failed, after retries, or why none could serve.
func (x *exchange) noBackendLeft(err error, lastFailure *Error) error {
	if lastFailure != nil && errors.Is(err, errNoBackendLeft) {
		return lastFailure
	}
	if !errors.Is(err, errNoBackendLeft) {
		return err
	}
	if x.model == nil {
		return errNoReadyBackend()
	}
	if !x.g.servesModel(x.matched.Rule, x.model) {
		return errModelNotFound(x.req.Model)
	}
	return errNoEndpoint(x.req.Model)
}

// route lets the exchange's router pick and reserve one of cands.
func (x *exchange) route(cands cache.PodSet) (*routing.Target, error) {
	return x.g.route(x.r.Context(), x.r.Header, x.req, x.model, x.router, x.strategy, cands)
}

// route lets router, the router of strategy, pick and reserve one of cands for req on
// model (nil for a plain request), waiting while it is queued.
func (g *Gateway) route(ctx context.Context, headers http.Header, req openai.Request, model *cache.Model,
	router routing.Router, strategy v1alpha1.Strategy, cands cache.PodSet) (*routing.Target, error) {
	rc := routing.NewRoutingContext(ctx, routing.Request{
		Model:        req.Model,
		Prompt:       req.Prompt,
		PromptTokens: req.PromptTokens(),
		MaxTokens:    req.MaxTokens,
		Stream:       req.Stream,
		RequestID:    headers.Get(HeaderRequestID),
		Headers:      headers,
	}, model, cands)
	start := time.Now()
	router.Route(rc)
	target, err := rc.Wait()
	g.metrics.routing.WithLabelValues(string(strategy)).Observe(since(start))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, routingError(req.Model, err)
	}
	return target, nil
}

// modelMissingPeek bounds how much of a 404 answer is read to tell whether the engine
// says it does not serve the model.
const modelMissingPeek = 4 << 10

// lacksModel reports whether resp is the engine's 404 saying that it does not serve the
// requested model (vLLM: "The model `X` does not exist."), as happens when an adapter was
// unloaded since the cache last listed the engine's models: nothing reached the client
// yet, so another instance of the model can be tried. It reads at most modelMissingPeek
// bytes and leaves resp.Body as it was for the relay otherwise.
func (x *exchange) lacksModel(resp *http.Response) bool {
	if x.model == nil || resp.StatusCode != http.StatusNotFound {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, modelMissingPeek))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return err == nil && bytes.Contains(head, []byte("does not exist"))
}

// retryable reports whether a failed round trip may be tried on another endpoint: it
// failed to connect, so the engine never saw it, and a streamed body is still unread.
func (x *exchange) retryable(err error) bool {
	return isConnectError(err) && (x.stream == nil || !x.stream.started())
}

// roundTripper returns what sends the request to port of svc: the gateway's own
// HTTP/1.1 client for a body in memory or none, http.Transport for a streamed body
// (which it writes while the answer arrives), a protocol switch or an h2c backend.
func (x *exchange) roundTripper(svc cache.Service, port int32) http.RoundTripper {
	t := x.g.transportFor(svc, port)
	if t != x.g.transport || (x.body == nil && x.r.ContentLength != 0) || upgradeProtocol(x.r) != "" {
		return t
	}
	return x.g.upstream
}

// send forwards the request through transport, after the rule's filters and then the
// backend's, to port of pod and returns the response headers. The upstream request ends
// with the client's.
//
// The rule's backend timeout, if any, bounds the round trip until the response body is
// closed; closing the body, or the idle watch of relay (idleWatcher), ends it. The
// gateway's own client watches its connections itself; any other round trip gets a
// context of its own for the watch to end.
func (x *exchange) send(transport http.RoundTripper, pod *cache.Pod, port int32, backend *httpfilter.Chain) (*http.Response, error) {
	ctx, cancel := x.r.Context(), context.CancelFunc(nil)
	if d := x.matched.Rule.BackendTimeout; d > 0 {
		ctx, cancel = context.WithTimeout(ctx, d)
	} else if transport != x.g.upstream {
		ctx, cancel = context.WithCancel(ctx)
	}
	out := upstreamRequest(ctx, x.r, pod.Address, port, x.body, x.stream)
	x.matched.Rule.Filters.ModifyRequest(out, x.matched.Prefix)
	backend.ModifyRequest(out, x.matched.Prefix)
	if transport != x.g.upstream {
		x.bodyShared = true // it may read the body after answering
	}
	resp, err := transport.RoundTrip(out)
	if cancel == nil {
		return resp, err
	}
	if err != nil {
		cancel()
		return nil, err
	}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &upgradedBody{cancelOnClose: &cancelOnClose{ReadCloser: rwc, cancel: cancel}, Writer: rwc}
	} else {
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	}
	return resp, nil
}

// idleWatcher is a response body that the relay can have cut off when the engine
// sends nothing for a while.
type idleWatcher interface {
	// watchIdle cuts the body off unless more of it, or its end, arrives within d;
	// each call restarts the wait. Closing the body ends the watch.
	watchIdle(d time.Duration)
}

// cancelOnClose is a response body that ends its round trip's context when closed, or
// when its idle watch fires.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
	idle   *time.Timer // nil until watchIdle
}

// watchIdle ends the round trip's context unless more arrives within d.
func (b *cancelOnClose) watchIdle(d time.Duration) { restart(&b.idle, d, b.cancel) }

// Close closes the body and ends the context.
func (b *cancelOnClose) Close() error {
	if b.idle != nil {
		b.idle.Stop()
	}
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// upstreamRequest returns the request r forwarded to addr:port with body (or stream
// when body is nil), with the client's method, path, query, Host and end-to-end headers,
// and the client's address appended to X-Forwarded-For and its scheme in
// X-Forwarded-Proto, as Envoy forwards them.
func upstreamRequest(ctx context.Context, r *http.Request, addr string, port int32, body []byte, stream io.Reader) *http.Request {
	u := *r.URL // the client's path and query, as the server parsed them
	u.Scheme, u.Host, u.User = "http", net.JoinHostPort(addr, strconv.Itoa(int(port))), nil
	out := &http.Request{
		Method: r.Method, URL: &u, Host: r.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, len(r.Header)+2), // and X-Forwarded-For and -Proto
		Body:   http.NoBody,
	}
	switch {
	case body != nil:
		setBody(out, body)
	case stream != nil && r.ContentLength != 0:
		out.Body, out.ContentLength = io.NopCloser(stream), r.ContentLength // -1: unknown, sent chunked
	}
	copyHeaders(out.Header, r.Header)
	if proto := upgradeProtocol(r); proto != "" {
		// Hop-by-hop, yet what asks the backend to switch protocols.
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", proto)
	}
	delete(out.Header, "Content-Length")
	forwardedFor(out.Header, r)
	return out.WithContext(ctx) // out itself stays on the stack
}

// replayableBody reads a request body held in memory, and replays it from its start
// for a request sent again (http.Request.GetBody). The upstream client takes its bytes
// to write them with the request's head.
type replayableBody struct {
	bytes.Reader
	body []byte
}

// setBody makes body, held in memory, the body of r, which GetBody replays for a request
// sent again.
func setBody(r *http.Request, body []byte) {
	rb := newReplayableBody(body)
	r.Body, r.GetBody, r.ContentLength = rb, rb.replay, int64(len(body))
}

// newReplayableBody returns a reader of body.
func newReplayableBody(body []byte) *replayableBody {
	b := &replayableBody{body: body}
	b.Reset(body)
	return b
}

// Close does nothing: the body is memory.
func (b *replayableBody) Close() error { return nil }

// take returns the bytes not read yet, as read.
func (b *replayableBody) take() []byte {
	rest := b.body[len(b.body)-b.Len():]
	b.Reset(nil)
	return rest
}

// replay returns a reader of the whole body.
func (b *replayableBody) replay() (io.ReadCloser, error) { return newReplayableBody(b.body), nil }

// forwardedFor appends the client of r to h's X-Forwarded-For, after the proxies a
// client-supplied value lists, and sets X-Forwarded-Proto to the scheme r arrived by.
func forwardedFor(h http.Header, r *http.Request) {
	if client, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := h["X-Forwarded-For"]; len(prior) > 0 {
			client = strings.Join(prior, ", ") + ", " + client
		}
		h["X-Forwarded-For"] = []string{client}
	}
	if r.TLS != nil {
		h["X-Forwarded-Proto"] = forwardedHTTPS
	} else {
		h["X-Forwarded-Proto"] = forwardedHTTP
	}
}

// forwardedHTTP and forwardedHTTPS are the values of X-Forwarded-Proto, shared by every
// request: a header filter that adds a value copies them (their capacity is their
// length), and none writes into them.
var forwardedHTTP, forwardedHTTPS = []string{"http"}, []string{"https"}

// relayTrailers adds the upstream's trailers to the client's response header h, as
// trailers (http.TrailerPrefix): gRPC's status travels in them.
func relayTrailers(h http.Header, trailers http.Header) {
	for k, vs := range trailers {
		for _, v := range vs {
			h.Add(http.TrailerPrefix+k, v)
		}
	}
}

// bodyBuffers hold the buffers request bodies are read into (*[]byte), so that a
// request does not allocate one.
var bodyBuffers sync.Pool

// maxPooledBodyBytes is the capacity of the largest body buffer kept for reuse.
const maxPooledBodyBytes = 1 << 20

// recycleBody returns the request body's buffer to bodyBuffers, unless it was shared.
// The upstream client has written the body before a round trip returns, so nothing
// reads it once the exchange ends.
func (x *exchange) recycleBody() {
	if x.bodyBuf == nil || x.bodyShared || cap(x.body) > maxPooledBodyBytes {
		return
	}
	*x.bodyBuf = x.body[:0]
	bodyBuffers.Put(x.bodyBuf)
}

// relayBuffers hold the buffers responses are relayed through, so that a request does
// not allocate one.
var relayBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relay copies resp to the client and releases the reservation when the response ends,
// fails or the client goes away. A response that must reach the client as it arrives —
// server-sent events, or a body of unknown length — is flushed after each chunk, so that
// events reach the client one by one; any other is left to the server's buffering, which
// sends small answers in one write with their headers.
func (x *exchange) relay(target *routing.Target, resp *http.Response, backend *httpfilter.Chain) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		x.relayUpgrade(target, resp, backend)
		return
	}
	defer target.Release(0)
	defer resp.Body.Close()
	h := x.w.Header()
	copyHeaders(h, resp.Header)
	h[HeaderEndpoint] = target.Pod.IDHeader()
	h[HeaderRequestID] = x.o.requestID
	x.matched.Rule.Filters.ModifyResponse(h)
	backend.ModifyResponse(h)
	x.w.WriteHeader(resp.StatusCode)
	var flusher *http.ResponseController
	if resp.ContentLength < 0 || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		flusher = http.NewResponseController(x.w)
		_ = flusher.Flush() // the headers, before the first event
	}
	var answer answerReader // what the router learns of a 200 answer
	if resp.StatusCode == http.StatusOK {
		answer = newAnswerReader(&x.req, target)
	}
	bp := relayBuffers.Get().(*[]byte)
	defer relayBuffers.Put(bp)
	buf := *bp
	// An engine that sends nothing for UpstreamIdleTimeout is cut off, and with it the
	// read below.
	idle := x.g.opts.UpstreamIdleTimeout
	watch, _ := resp.Body.(idleWatcher)
	if watch != nil {
		watch.watchIdle(idle)
	}
	for {
		n, err := resp.Body.Read(buf)
		if watch != nil && n > 0 {
			watch.watchIdle(idle)
		}
		if n > 0 {
			// Read before it is relayed: a client that has the first event finds its
			// request decoding.
			answer.read(buf[:n], target)
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				return // the client went away; its context cancels the upstream request
			}
			if flusher != nil {
				_ = flusher.Flush()
			}
		}
		if err == io.EOF {
			relayTrailers(x.w.Header(), resp.Trailer)
			answer.report(target)
			return
		}
		if err != nil {
			x.upstreamDied(target.Pod)
			return
		}
	}
}

// upstreamDied ends a response whose engine failed mid-body: a stream gets a final
// OpenAI-shaped error event; any other response is aborted, so that the client sees a
// truncated response rather than a well-formed partial one.
func (x *exchange) upstreamDied(pod *cache.Pod) {
	if x.r.Context().Err() != nil {
		return
	}
	if !x.req.Stream {
		panic(http.ErrAbortHandler)
	}
	msg := fmt.Sprintf("The model server %s failed while streaming the response.", pod.Key)
	_, _ = fmt.Fprintf(x.w, "data: {\"error\":{\"message\":%q,\"type\":\"server_error\",\"code\":\"upstream_failed\"}}\n\n", msg)
	_ = http.NewResponseController(x.w).Flush()
}

// upstreamError maps a failed upstream round trip to the client's error.
func upstreamError(pod *cache.Pod, err error) *Error {
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() && !isConnectError(err) {
		return errTimeout("The server did not answer in time.")
	}
	return errUnreachable(fmt.Sprintf("The server %s could not be reached.", pod.Key))
}

// isConnectError reports whether err happened before the request reached the engine,
// so that retrying it elsewhere cannot run it twice.
func isConnectError(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// hopHeader reports whether name, canonical, is a hop-by-hop header, which a proxy does
// not forward (RFC 9110 §7.6.1).
func hopHeader(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// copyHeaders copies src into dst without hop-by-hop headers, including those that
// src's Connection header names. dst shares src's values, capped at their length so that
// adding a value to either header copies them rather than writing into the other.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		if !hopHeader(k) {
			dst[k] = vs[:len(vs):len(vs)]
		}
	}
	for _, v := range src["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			dst.Del(strings.TrimSpace(name))
		}
	}
}

// onceBody is a plain request's body, streamed to the first endpoint that reads it. It
// records whether any byte was read, so that a connection failure before that can be
// retried elsewhere, and never closes the client's body (the server does).
//
// A body of known length ends at that length without another read of the client's body:
// the transport reads once more after the last byte to check that nothing follows, and
// the engine may have answered by then, so that the gateway has relayed the response
// headers — after which HTTP/1 forbids reading the request body, the read fails and the
// transport drops the connection with the answer in it.
type onceBody struct {
	r io.Reader
	// left is how many bytes remain of a body of known length; -1 when it is unknown.
	left int64
	read atomic.Bool
}

func (b *onceBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	if b.left == 0 {
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
		if b.left == 0 && err == nil {
			err = io.EOF
		}
	}
	return n, err
}

// started reports whether an upstream request has read from the body.
func (b *onceBody) started() bool { return b.read.Load() }
