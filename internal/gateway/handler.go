package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/gateway/inbound"
	"github.com/switchboard-llm/switchboard/internal/openai"
	"github.com/switchboard-llm/switchboard/internal/outlier"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// DefaultRetryAttempts is the number of further endpoints tried after a connection
// failure or a 5xx answer when the rule's policy does not say (no policy, or no
// spec.retry).
const DefaultRetryAttempts = 2

// outcome is what the request log and metrics record of one request.
type outcome struct {
	route, model string
	// pod is the pod that answered; nil when none did.
	pod    *cache.Pod
	status int
	// requestID is the request's id as the header value it is sent as, shared by the
	// request and its answer's headers.
	requestID []string
}

// endpointLabel is the answering pod as metrics and logs name it, "" when none did.
func (o *outcome) endpointLabel() string {
	if o.pod == nil {
		return ""
	}
	return o.pod.ID()
}

// fail writes err to the client and records its status.
func (o *outcome) fail(w http.ResponseWriter, r *http.Request, err error) {
	o.status = writeError(w, r, err)
}

// Handler returns the HTTP handler of the gateway listeners on addr.
func (g *Gateway) Handler(addr routetable.Addr) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var o outcome
		if ids := r.Header[HeaderRequestID]; len(ids) > 0 && ids[0] != "" {
			o.requestID = ids[:1:1] // capped: adding a value copies it
		} else {
			o.requestID = []string{newRequestID()}
			r.Header[HeaderRequestID] = o.requestID
		}
		w.Header()[HeaderRequestID] = o.requestID
		defer func() { // also when an engine that died mid-answer aborts the handler
			g.metrics.observe(&o)
			if log := g.log.V(1); log.Enabled() { // the arguments cost, even unlogged
				// Prompts are never logged.
				log.Info("Request", "requestID", o.requestID[0], "method", r.Method, "path", r.URL.Path,
					"route", o.route, "model", o.model, "endpoint", o.endpointLabel(), "status", o.status,
					"duration", time.Since(start))
			}
		}()
		g.serve(addr, w, r, start, &o)
	})
}

// serve handles one request on a listener address, recording what happened in o. A
// rule with a RoutingPolicy filter routes by model (DESIGN §5); any other rule is plain
// Gateway API routing.
func (g *Gateway) serve(addr routetable.Addr, w http.ResponseWriter, r *http.Request, start time.Time, o *outcome) {
	table := g.Table()
	if misdirected(table, addr, w, r, o) {
		return
	}
	m, ok := table.Match(addr, r)
	if !ok {
		o.fail(w, r, errRouteNotFound(fmt.Sprintf("No route matches %s %s on this listener.", r.Method, r.URL.Path)))
		return
	}
	rule := m.Rule
	o.route = rule.RouteName
	if rule.InvalidFilter != "" {
		o.fail(w, r, errInvalidFilter(rule.InvalidFilter))
		return
	}
	if location, status, ok := rule.Filters.Redirect(r, m.Prefix, addr.Port, listenerScheme(addr)); ok {
		w.Header().Set("Location", location)
		w.WriteHeader(status)
		o.status = status
		return
	}
	if rule.RequestTimeout > 0 {
		ctx, cancel := context.WithTimeoutCause(r.Context(), rule.RequestTimeout, errRequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	x := &exchange{g: g, w: w, r: r, matched: m, start: start, o: o, retries: DefaultRetryAttempts,
		outlier: outlier.DefaultConfig(), bodyShared: len(rule.Mirrors) > 0}
	defer x.recycleBody()
	if rule.Policy == nil {
		x.servePlain()
		return
	}
	if g.serveModels(w, r, rule, o) {
		return
	}
	policy, ok := g.view.Policies.Get(*rule.Policy)
	if !ok { // deleted since the table was built
		o.fail(w, r, errInvalidFilter(fmt.Sprintf("RoutingPolicy %s referenced by the route does not exist.", rule.Policy)))
		return
	}
	x.retries = retryAttempts(policy)
	x.outlier = outlierConfig(policy)
	x.serveInference(policy)
}

// readBody reads the whole request body within the inbound limits, into a buffer of
// bodyBuffers, answering the client itself when it cannot.
func (x *exchange) readBody() ([]byte, bool) {
	bp, _ := bodyBuffers.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	body, err := inbound.ReadBody(x.w, x.r, x.g.opts.Inbound, *bp)
	if err == nil {
		*bp, x.bodyBuf = body, bp
		return body, true
	}
	bodyBuffers.Put(bp)
	e := &Error{Status: inbound.StatusCode(err), Type: "invalid_request_error", Code: "invalid_request",
		Message: "The request body could not be read."}
	switch {
	case errors.Is(err, inbound.ErrBodyTooLarge):
		e = errTooLarge(x.g.opts.Inbound.MaxBodyBytes)
	case errors.Is(err, inbound.ErrBodyTimeout):
		e.Code, e.Message = "request_timeout", "The request body did not arrive in time."
	}
	// A body that timed out has cancelled the request's context, yet the client still
	// waits for the answer.
	e.write(x.w)
	x.o.status = e.Status
	return nil, false
}

// retryAttempts returns how many further endpoints a request may try after connection
// failures under policy.
func retryAttempts(policy *v1alpha1.RoutingPolicy) int {
	if policy.Spec.Retry == nil || policy.Spec.Retry.Attempts == nil {
		return DefaultRetryAttempts
	}
	return int(*policy.Spec.Retry.Attempts)
}

// outlierConfig returns the outlier detection of policy: its spec.outlierDetection, with
// defaults for what it leaves unset.
func outlierConfig(policy *v1alpha1.RoutingPolicy) outlier.Config {
	cfg := outlier.DefaultConfig()
	od := policy.Spec.OutlierDetection
	if od == nil {
		return cfg
	}
	if od.ConsecutiveFailures != nil {
		cfg.ConsecutiveFailures = int(*od.ConsecutiveFailures)
	}
	if od.BaseEjectionTime != nil {
		cfg.BaseEjectionTime = od.BaseEjectionTime.Duration
	}
	if od.MaxEjectionPercent != nil {
		cfg.MaxEjectionPercent = int(*od.MaxEjectionPercent)
	}
	return cfg
}

// clientClosedRequest is the status recorded, never sent, for a client that went away.
const clientClosedRequest = 499

// errRequestTimeout ends the context of a request that ran out of its rule's
// timeouts.request.
var errRequestTimeout = errors.New("the route rule's request timeout elapsed")

// writeError sends err to the client, unless the client has gone, and returns the
// status; a request out of its rule's request timeout is answered 504 whatever err is.
func writeError(w http.ResponseWriter, r *http.Request, err error) int {
	var e *Error
	switch {
	case errors.Is(context.Cause(r.Context()), errRequestTimeout):
		e = errTimeout("The route's request timeout elapsed before the answer.")
	case r.Context().Err() != nil:
		return clientClosedRequest
	case !errors.As(err, &e):
		e = errInternal(err.Error())
	}
	if r.Method == http.MethodHead {
		// A HEAD answer has no body, so it names no body type either: clients that
		// decode a JSON Content-Type would fail on the empty body.
		w.WriteHeader(e.Status)
		return e.Status
	}
	e.write(w)
	return e.Status
}

// newRequestID returns a random 16-byte hex id.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// promptMode returns how a body is parsed for router (nil: any): with the prompt's text
// if the router reads it, otherwise only its length.
func promptMode(router routing.Router) openai.PromptMode {
	if routing.ReadsPrompt(router) {
		return openai.PromptText
	}
	return openai.PromptLength
}

// parseRequest parses an OpenAI-compatible body sent to path, by the API the path names
// (a JSON body, or a multipart form of contentType for audio), mapping failures to 400.
// mode says whether a JSON body's prompt text is built.
func parseRequest(path, contentType string, body []byte, mode openai.PromptMode) (openai.Request, error) {
	var req openai.Request
	var err error
	if ep := openai.EndpointOf(path); ep.Multipart() {
		req, err = openai.ParseMultipart(ep, contentType, body)
	} else {
		req, err = openai.ParseRequestFor(ep, body, mode)
	}
	if err != nil {
		var reqErr *openai.RequestError
		if errors.As(err, &reqErr) {
			return req, errBadRequest(reqErr.Message)
		}
		return req, errBadRequest(err.Error())
	}
	return req, nil
}
