package gateway

import (
	"errors"
	"fmt"
	"net/http"

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
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// HTTPStatus returns the HTTP status code the client receives.
func (e *Error) HTTPStatus() int { return e.Status }

// write sends e to the client as an OpenAI-shaped JSON error.
func (e *Error) write(w http.ResponseWriter) {
	openai.WriteError(w, e.Status, e.Type, e.Code, e.Message)
}

// Error constructors, one per status of DESIGN §5.
func errBadRequest(msg string) *Error {
	return &Error{http.StatusBadRequest, "invalid_request_error", "invalid_request", msg}
}

// errUnknownStrategy is a request's x-routing-strategy naming no strategy: the client's
// error, not the policy's.
func errUnknownStrategy(name string) *Error {
	return errBadRequest(fmt.Sprintf("The %s header names %q, which is not a routing strategy.", HeaderStrategy, name))
}
func errRouteNotFound(msg string) *Error {
	return &Error{http.StatusNotFound, "invalid_request_error", "route_not_found", msg}
}
func errModelNotFound(model string) *Error {
	return &Error{http.StatusNotFound, "invalid_request_error", "model_not_found",
		fmt.Sprintf("The model %q does not exist or is not served here.", model)}
}
func errTooLarge(limit int64) *Error {
	return &Error{http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
		fmt.Sprintf("The request body is larger than %d bytes.", limit)}
}
func errQueueFull() *Error {
	return &Error{http.StatusTooManyRequests, "rate_limit_error", "queue_full",
		"Every endpoint for this model is at capacity and the queue is full; retry later."}
}
func errInvalidFilter(msg string) *Error {
	return &Error{http.StatusInternalServerError, "server_error", "invalid_route_filter", msg}
}
func errInvalidBackend(msg string) *Error {
	return &Error{http.StatusInternalServerError, "server_error", "invalid_backend", msg}
}
func errNoReadyBackend() *Error {
	return &Error{http.StatusServiceUnavailable, "server_error", "no_ready_endpoint",
		"No ready endpoint of the route's backends can take the request."}
}
func errInternal(msg string) *Error {
	return &Error{http.StatusInternalServerError, "server_error", "internal_error", msg}
}
func errUnreachable(msg string) *Error {
	return &Error{http.StatusBadGateway, "server_error", "upstream_unreachable", msg}
}
func errNoEndpoint(model string) *Error {
	return &Error{http.StatusServiceUnavailable, "server_error", "no_ready_endpoint",
		fmt.Sprintf("No ready endpoint serves the model %q.", model)}
}
func errTimeout(msg string) *Error {
	return &Error{http.StatusGatewayTimeout, "server_error", "upstream_timeout", msg}
}

// routingError maps a routing rejection to the client's error.
func routingError(model string, err error) *Error {
	switch {
	case errors.Is(err, routing.ErrNoEndpoints):
		return errNoEndpoint(model)
	case errors.Is(err, routing.ErrQueueFull):
		return errQueueFull()
	default:
		return errInternal("routing failed: " + err.Error())
	}
}
