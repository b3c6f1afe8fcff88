package inbound

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// bodyServer serves ReadBody under l: it echoes a body it read, answers StatusCode
// for an error, and reports every ReadBody error on the returned channel.
func bodyServer(t *testing.T, startServer serverStarter, l Limits) (*testServer, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	srv := startServer(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := ReadBody(w, r, l, nil)
		if err != nil {
			errs <- err
			w.WriteHeader(StatusCode(err))
			return
		}
		w.Write(body)
	}))
	return srv, errs
}

func TestReadBodySizes(t *testing.T) {
	eachServer(t, func(t *testing.T, startServer serverStarter) {
		const limit = 4096
		srv, errs := bodyServer(t, startServer, Limits{MaxBodyBytes: limit})
		for _, size := range []int{0, 1, firstBufferBytes - 1, firstBufferBytes, firstBufferBytes + 1, 3000, limit, limit + 1, 3 * limit} {
			for _, chunked := range []bool{false, true} {
				t.Run(fmt.Sprintf("%d bytes chunked=%v", size, chunked), func(t *testing.T) {
					sent := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
					req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(sent))
					if err != nil {
						t.Fatal(err)
					}
					if chunked {
						req.Body = io.NopCloser(bytes.NewReader(sent)) // hides the length
						req.ContentLength = -1
					}
					resp, err := srv.Client().Do(req)
					if err != nil {
						t.Fatalf("request: %v", err)
					}
					defer resp.Body.Close()
					got, err := io.ReadAll(resp.Body)
					if err != nil {
						t.Fatalf("read response: %v", err)
					}
					if size > limit {
						if resp.StatusCode != http.StatusRequestEntityTooLarge {
							t.Errorf("status = %d, want 413", resp.StatusCode)
						}
						if err := <-errs; !errors.Is(err, ErrBodyTooLarge) {
							t.Errorf("ReadBody error = %v, want ErrBodyTooLarge", err)
						}
						return
					}
					if resp.StatusCode != http.StatusOK || !bytes.Equal(got, sent) {
						t.Errorf("status %d with %d bytes echoed, want 200 echoing the %d sent", resp.StatusCode, len(got), size)
					}
				})
			}
		}
	})
}

func TestReadBodyFromStalledClientTimesOut(t *testing.T) {
	eachServer(t, func(t *testing.T, startServer serverStarter) {
		for _, tc := range []struct {
			name    string
			request string
		}{
			{"declared length", "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\nonly part"},
			{"chunked", "POST / HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\nonly part"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				srv, errs := bodyServer(t, startServer, Limits{BodyReadTimeout: 200 * time.Millisecond})
				c := dial(t, srv)
				c.send(t, tc.request)
				if resp := c.response(t); resp.StatusCode != http.StatusRequestTimeout {
					t.Errorf("status = %d, want 408", resp.StatusCode)
				}
				if err := <-errs; !errors.Is(err, ErrBodyTimeout) {
					t.Errorf("ReadBody error = %v, want ErrBodyTimeout", err)
				}
			})
		}
	})
}

func TestReadBodyTimeoutBoundsTheWholeBody(t *testing.T) {
	eachServer(t, func(t *testing.T, startServer serverStarter) {
		srv, errs := bodyServer(t, startServer, Limits{BodyReadTimeout: 200 * time.Millisecond})
		c := dial(t, srv)
		c.send(t, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\n")
		stop := make(chan struct{})
		trickled := make(chan struct{})
		go func() { // one byte every 20ms: each read makes progress, the body never completes
			defer close(trickled)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
		resp := c.response(t)
		close(stop)
		<-trickled
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("status = %d, want 408", resp.StatusCode)
		}
		if err := <-errs; !errors.Is(err, ErrBodyTimeout) {
			t.Errorf("ReadBody error = %v, want ErrBodyTimeout", err)
		}
	})
}

func TestReadBodyLeavesTheResponseUnbounded(t *testing.T) {
	eachServer(t, func(t *testing.T, startServer serverStarter) {
		const timeout = 100 * time.Millisecond
		l := Limits{BodyReadTimeout: timeout}
		srv := startServer(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := ReadBody(w, r, l, nil)
			if err != nil {
				w.WriteHeader(StatusCode(err))
				return
			}
			w.Write(body)
			http.NewResponseController(w).Flush()
			// Stream on past the body deadline: the request must stay live.
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * timeout):
			}
			io.WriteString(w, " and more")
		}))
		resp, err := srv.Client().Post(srv.URL, "text/plain", strings.NewReader("hello"))
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		if string(got) != "hello and more" {
			t.Errorf("response = %q, want %q: the body deadline cut the response short", got, "hello and more")
		}
	})
}

func TestReadLimitedReusesTheBuffer(t *testing.T) {
	sent := strings.Repeat("0123456789abcdef", 256)
	for _, tc := range []struct {
		name   string
		cap    int
		shared bool
	}{{"roomy", len(sent) + 1, true}, {"small", 16, false}} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, 3, tc.cap)
			got, err := readLimited(strings.NewReader(sent), int64(len(sent)), 1<<20, buf[:0])
			if err != nil || string(got) != sent {
				t.Fatalf("readLimited = %.20q..., %v; want the %d bytes sent", got, err, len(sent))
			}
			if shared := &got[0] == &buf[:1][0]; shared != tc.shared {
				t.Errorf("body in the given buffer: %v, want %v", shared, tc.shared)
			}
		})
	}
}

func TestReadBodyNeedsReadDeadlines(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("hello"))
	_, err := ReadBody(httptest.NewRecorder(), r, Limits{}, nil)
	if !errors.Is(err, http.ErrNotSupported) || StatusCode(err) != http.StatusInternalServerError {
		t.Errorf("ReadBody without deadline support = %v (status %d), want http.ErrNotSupported (500)", err, StatusCode(err))
	}
}

func TestStatusCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, http.StatusOK},
		{tooLarge(1), http.StatusRequestEntityTooLarge},
		{fmt.Errorf("read request body: %w", ErrBodyTimeout), http.StatusRequestTimeout},
		{fmt.Errorf("set request body read deadline: %w", http.ErrNotSupported), http.StatusInternalServerError},
		{fmt.Errorf("read request body: %w", io.ErrUnexpectedEOF), http.StatusBadRequest},
	} {
		if got := StatusCode(tc.err); got != tc.want {
			t.Errorf("StatusCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
