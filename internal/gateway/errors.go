package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-llm/switchboard/internal/openai"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// Error is a request failure with the HTTP status and OpenAI-shaped error the client
// receives (DESIGN §5).
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Type and Code classify the error in the OpenAI error body.
	Type, Code string
	// Message is safe to show the client.
	Message string
	// RetryAfter, if > 0, is sent in a Retry-After header (whole seconds, rounded up): when
	// the client may expect the gateway to take the request.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// HTTPStatus returns the HTTP status code the client receives.
func (e *Error) HTTPStatus() int { return e.Status }

// SetHeaders sets the headers e's answer carries besides the body's: Retry-After.
func (e *Error) SetHeaders(h http.Header) {
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
}

// write sends e to the client as an OpenAI-shaped JSON error.
func (e *Error) write(w http.ResponseWriter) {
	e.SetHeaders(w.Header())
	openai.WriteError(w, e.Status, e.Type, e.Code, e.Message)
}

// Error constructors, one per status of DESIGN §5.
func errBadRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request",
		Message: msg}
}

// errUnknownStrategy is a request's x-routing-strategy naming no strategy: the client's
// error, not the policy's.
func errUnknownStrategy(name string) *Error {
	return errBadRequest(fmt.Sprintf("The %s header names %q, which is not a routing strategy.", strings.ToLower(HeaderStrategy), name))
}
func errRouteNotFound(msg string) *Error {
	return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "route_not_found",
		Message: msg}
}
func errModelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found",
		Message: fmt.Sprintf("The model %q does not exist or is not served here.", model)}
}
func errTooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: fmt.Sprintf("The request body is larger than %d bytes.", limit)}
}

// queueRetryAfter is the Retry-After of the answers to requests the queue could not
// take: a slot frees as soon as any request on the model's endpoints ends.
const queueRetryAfter = time.Second

func errQueueFull() *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "queue_full",
		Message: "Every endpoint for this model is at capacity and the queue is full; retry later.", RetryAfter: queueRetryAfter}
}
func errQueueTimeout() *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "queue_timeout",
		Message: "Every endpoint for this model stayed at capacity for as long as the request may wait; retry later.", RetryAfter: queueRetryAfter}
}
func errInvalidFilter(msg string) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "invalid_route_filter",
		Message: msg}
}
func errInvalidBackend(msg string) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "invalid_backend",
		Message: msg}
}
func errNoReadyBackend() *Error {
	return errUnavailable("No ready endpoint of the route's backends can take the request.")
}
func errUnavailable(msg string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "no_ready_endpoint", Message: msg}
}
func errInternal(msg string) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
		Message: msg}
}
func errUnreachable(msg string) *Error {
	return &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_unreachable",
		Message: msg}
}
func errNoEndpoint(model string) *Error {
	return errUnavailable(fmt.Sprintf("No ready endpoint serves the model %q.", model))
}
func errTimeout(msg string) *Error {
	return &Error{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "upstream_timeout",
		Message: msg}
}

// routingError maps a routing rejection to the client's error.
func routingError(model string, err error) *Error {
	switch {
	case errors.Is(err, routing.ErrNoEndpoints):
		return errNoEndpoint(model)
	case errors.Is(err, routing.ErrQueueFull):
		return errQueueFull()
	case errors.Is(err, routing.ErrQueueTimeout):
		return errQueueTimeout()
	default:
		return errInternal("routing failed: " + err.Error())
	}
}
