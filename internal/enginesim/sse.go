package enginesim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
)

// sseWriter writes a text/event-stream response, flushing every event. Its first error
// sticks: later sends write nothing and return it, so a caller may check once at the end.
type sseWriter struct {
	bw  *bufio.Writer
	rc  *http.ResponseController
	err error
}

// newSSEWriter answers 200 with the event-stream headers.
func newSSEWriter(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{bw: bufio.NewWriter(w), rc: http.NewResponseController(w)}
}

// send writes v as the JSON data of one event, named by an event: line unless event is "".
func (s *sseWriter) send(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil && s.err == nil {
		s.err = err
	}
	return s.sendRaw(event, b)
}

// sendRaw writes one event whose data line is data as it is.
func (s *sseWriter) sendRaw(event string, data []byte) error {
	if s.err != nil {
		return s.err
	}
	if event != "" {
		_, s.err = fmt.Fprintf(s.bw, "event: %s\n", event)
	}
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.bw, "data: %s\n\n", data)
	}
	if s.err == nil {
		s.err = s.bw.Flush()
	}
	if s.err == nil {
		s.err = s.rc.Flush()
	}
	return s.err
}
