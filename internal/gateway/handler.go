package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
)

// DefaultRetryAttempts is the number of further endpoints tried after a connection
// failure when the rule's policy does not say (no policy, or no spec.retry).
const DefaultRetryAttempts = 2

// outcome is what the request log and metrics record of one request.
type outcome struct {
	route, model, endpoint string
	status                 int
}

// fail writes err to the client and records its status.
func (o *outcome) fail(w http.ResponseWriter, r *http.Request, err error) {
	o.status = writeError(w, r, err)
}

// Handler returns the HTTP handler of the gateway listeners on port.
func (g *Gateway) Handler(port int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		reqID := r.Header.Get(HeaderRequestID)
		if reqID == "" {
			reqID = newRequestID()
			r.Header.Set(HeaderRequestID, reqID)
		}
		w.Header().Set(HeaderRequestID, reqID)
		var o outcome
		defer func() {
			g.metrics.observe(&o)
			// Prompts are never logged.
			g.log.V(1).Info("Request", "requestID", reqID, "method", r.Method, "path", r.URL.Path,
				"route", o.route, "model", o.model, "endpoint", o.endpoint, "status", o.status,
				"duration", time.Since(start))
		}()
		g.serve(port, w, r, start, &o)
	})
}

// serve handles one request on a listener port (DESIGN §5), recording what happened
// in o.
func (g *Gateway) serve(port int32, w http.ResponseWriter, r *http.Request, start time.Time, o *outcome) {
	rule, ok := g.Table().Match(port, r)
	if !ok {
		o.fail(w, r, errRouteNotFound(fmt.Sprintf("No route matches %s %s on this listener.", r.Method, r.URL.Path)))
		return
	}
	o.route = rule.Route.String()
	if rule.InvalidFilter != "" {
		o.fail(w, r, errInvalidFilter(rule.InvalidFilter))
		return
	}
	var policy *v1alpha1.RoutingPolicy
	if rule.Policy != nil {
		if policy, ok = g.view.Policies.Get(*rule.Policy); !ok {
			o.fail(w, r, errInvalidFilter(fmt.Sprintf("RoutingPolicy %s referenced by the route does not exist.", rule.Policy)))
			return
		}
	}
	body, err := readBody(w, r, g.opts.MaxBodyBytes)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			o.fail(w, r, errTooLarge(g.opts.MaxBodyBytes))
		} else {
			o.fail(w, r, errBadRequest("The request body could not be read."))
		}
		return
	}

	retries := retryAttempts(policy)
	var exclude map[*cache.Pod]bool
	var unreachable *Error // the last connection failure, if any
	for attempt := 0; ; attempt++ {
		d, err := g.decide(r.Context(), r.Header, body, rule.Backends, policy, exclude)
		if d != nil && d.model != nil {
			o.model = d.model.Name // only served names: clients cannot grow the label set
		}
		if err != nil {
			var e *Error
			if unreachable != nil && errors.As(err, &e) && e.Status == http.StatusServiceUnavailable {
				err = unreachable // every candidate left has failed to connect
			}
			o.fail(w, r, err)
			return
		}
		o.endpoint = d.target.Pod.Key.String()
		if attempt == 0 {
			g.metrics.overhead.Observe(since(start))
		}
		resp, err := g.send(r, d, body)
		if err == nil {
			o.status = resp.StatusCode
			g.relay(w, r, d, resp)
			return
		}
		d.target.Release(0)
		unreachable = upstreamError(d, err)
		if isConnectError(err) && attempt < retries && r.Context().Err() == nil {
			if exclude == nil {
				exclude = make(map[*cache.Pod]bool)
			}
			exclude[d.target.Pod] = true
			continue
		}
		o.fail(w, r, unreachable)
		return
	}
}

// readBody reads the request body, at most limit bytes, in one allocation when the
// client declared its length.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength <= limit {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	return buf.Bytes(), err
}

// retryAttempts returns how many further endpoints a request may try after connection
// failures under policy.
func retryAttempts(policy *v1alpha1.RoutingPolicy) int {
	if policy == nil || policy.Spec.Retry == nil || policy.Spec.Retry.Attempts == nil {
		return DefaultRetryAttempts
	}
	return int(*policy.Spec.Retry.Attempts)
}

// clientClosedRequest is the status recorded, never sent, for a client that went away.
const clientClosedRequest = 499

// writeError sends err to the client, unless the client has gone, and returns the
// status.
func writeError(w http.ResponseWriter, r *http.Request, err error) int {
	if r.Context().Err() != nil {
		return clientClosedRequest
	}
	var e *Error
	if !errors.As(err, &e) {
		e = errInternal(err.Error())
	}
	e.write(w)
	return e.Status
}

// upstreamError maps a failed upstream round trip to the client's error.
func upstreamError(d *decision, err error) *Error {
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() && !isConnectError(err) {
		return errTimeout()
	}
	return errUnreachable(fmt.Sprintf("The model server %s could not be reached.", d.target.Pod.Key))
}

// isConnectError reports whether err happened before the request reached the engine,
// so that retrying it elsewhere cannot run it twice.
func isConnectError(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// hopHeaders are the hop-by-hop headers a proxy does not forward (RFC 9110 §7.6.1).
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// copyHeaders copies src into dst without hop-by-hop headers.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append(dst[k][:0:0], vs...)
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
}

// send forwards the request to the decided endpoint and returns its response headers.
// The upstream request ends with the client's.
func (g *Gateway) send(r *http.Request, d *decision, body []byte) (*http.Response, error) {
	pod := d.target.Pod
	url := "http://" + net.JoinHostPort(pod.Address, strconv.Itoa(int(pod.Port))) + r.URL.RequestURI()
	out, err := http.NewRequestWithContext(r.Context(), r.Method, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build upstream request: %w", err)
	}
	copyHeaders(out.Header, r.Header)
	out.Header.Del("Content-Length")
	out.ContentLength = int64(len(body))
	return g.transport.RoundTrip(out)
}

// relay streams resp to the client, flushing each chunk as it arrives so that
// server-sent events reach the client one by one, and releases the reservation when the
// response ends, fails or the client goes away.
func (g *Gateway) relay(w http.ResponseWriter, r *http.Request, d *decision, resp *http.Response) {
	defer d.target.Release(0)
	defer resp.Body.Close()
	copyHeaders(w.Header(), resp.Header)
	w.Header().Set(HeaderEndpoint, d.target.Pod.Key.String())
	w.Header().Set(HeaderRequestID, r.Header.Get(HeaderRequestID))
	w.WriteHeader(resp.StatusCode)
	flusher := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client went away; its context cancels the upstream request
			}
			_ = flusher.Flush()
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			g.upstreamDied(w, r, d)
			return
		}
	}
}

// upstreamDied ends a response whose engine failed mid-body: a stream gets a final
// OpenAI-shaped error event; any other response is aborted, so that the client sees a
// truncated response rather than a well-formed partial one.
func (g *Gateway) upstreamDied(w http.ResponseWriter, r *http.Request, d *decision) {
	if r.Context().Err() != nil {
		return
	}
	if !d.req.Stream {
		panic(http.ErrAbortHandler)
	}
	msg := fmt.Sprintf("The model server %s failed while streaming the response.", d.target.Pod.Key)
	_, _ = fmt.Fprintf(w, "data: {\"error\":{\"message\":%q,\"type\":\"server_error\",\"code\":\"upstream_failed\"}}\n\n", msg)
	_ = http.NewResponseController(w).Flush()
}

// newRequestID returns a random 16-byte hex id.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Pick chooses and reserves an endpoint for an OpenAI-compatible request body among
// every ready endpoint of its model, with the default strategy: the endpoint picker
// that Envoy's ext_proc filter asks. release MUST be called once when the response
// ends. Errors carry their HTTP status (Error.HTTPStatus).
func (g *Gateway) Pick(ctx context.Context, headers http.Header, body []byte) (endpoint string, release func(), err error) {
	d, err := g.decide(ctx, headers, body, nil, nil, nil)
	if err != nil {
		return "", nil, err
	}
	pod := d.target.Pod
	return net.JoinHostPort(pod.Address, strconv.Itoa(int(pod.Port))), func() { d.target.Release(0) }, nil
}
