package extproc

import (
	"bytes"
	"net/http"

	"github.com/switchboard-llm/switchboard/internal/openai"
)

// writeError writes an OpenAI-shaped error for status: 4xx are invalid_request_error
// (429 rate_limit_error), 5xx server_error, with a code for the statuses the gateway
// documents.
func writeError(w http.ResponseWriter, status int, message string) {
	errType, code := "invalid_request_error", ""
	switch {
	case status == http.StatusNotFound:
		code = "model_not_found"
	case status == http.StatusRequestEntityTooLarge:
		code = "request_too_large"
	case status == http.StatusTooManyRequests:
		errType, code = "rate_limit_error", "queue_full"
	case status == http.StatusServiceUnavailable:
		errType, code = "server_error", "no_ready_endpoint"
	case status >= 500:
		errType = "server_error"
	}
	openai.WriteError(w, status, errType, code, message)
}

// recordedResponse is an http.ResponseWriter that keeps what is written, so that the
// gateway's HTTP error writer can fill an ext_proc immediate response.
type recordedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecordedResponse() *recordedResponse {
	return &recordedResponse{header: make(http.Header), status: http.StatusOK}
}

func (r *recordedResponse) Header() http.Header         { return r.header }
func (r *recordedResponse) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *recordedResponse) WriteHeader(status int)      { r.status = status }
