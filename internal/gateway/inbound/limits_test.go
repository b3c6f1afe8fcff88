package inbound

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestWithDefaults(t *testing.T) {
	defaults := Limits{
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		BodyReadTimeout:   DefaultBodyReadTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		MaxBodyBytes:      DefaultMaxBodyBytes,
	}
	custom := Limits{
		ReadHeaderTimeout: time.Second,
		BodyReadTimeout:   2 * time.Second,
		IdleTimeout:       3 * time.Second,
		MaxHeaderBytes:    4,
		MaxBodyBytes:      5,
	}
	for _, tc := range []struct {
		name string
		in   Limits
		want Limits
	}{
		{"zero takes every default", Limits{}, defaults},
		{"negative takes every default", Limits{-1, -1, -1, -1, -1}, defaults},
		{"set fields are kept", custom, custom},
		{"only zero fields change", Limits{MaxBodyBytes: 5}, Limits{
			ReadHeaderTimeout: DefaultReadHeaderTimeout,
			BodyReadTimeout:   DefaultBodyReadTimeout,
			IdleTimeout:       DefaultIdleTimeout,
			MaxHeaderBytes:    DefaultMaxHeaderBytes,
			MaxBodyBytes:      5,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.in.WithDefaults(); got != tc.want {
				t.Errorf("WithDefaults() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNewServerSetsLimitsButNoResponseTimeout(t *testing.T) {
	h := http.NotFoundHandler()
	srv := NewServer(h, Limits{ReadHeaderTimeout: time.Second, IdleTimeout: 2 * time.Second, MaxHeaderBytes: 3})
	if srv.ReadHeaderTimeout != time.Second || srv.IdleTimeout != 2*time.Second || srv.MaxHeaderBytes != 3 {
		t.Errorf("server limits = (%v, %v, %d), want (1s, 2s, 3)", srv.ReadHeaderTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	if srv.ReadTimeout != 0 || srv.WriteTimeout != 0 {
		t.Errorf("ReadTimeout, WriteTimeout = %v, %v; want none: bodies are bounded by ReadBody and responses stream", srv.ReadTimeout, srv.WriteTimeout)
	}
	if srv.Handler == nil {
		t.Error("Handler not set")
	}
	if d := NewServer(h, Limits{}); d.ReadHeaderTimeout != DefaultReadHeaderTimeout || d.IdleTimeout != DefaultIdleTimeout || d.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("zero Limits gave (%v, %v, %d), want the defaults", d.ReadHeaderTimeout, d.IdleTimeout, d.MaxHeaderBytes)
	}
	if p := srv.Protocols; p == nil || !p.HTTP1() || !p.HTTP2() || p.UnencryptedHTTP2() {
		t.Errorf("protocols over TLS = %v, want HTTP1 and HTTP2", p)
	}
}

func TestNewClearTextServerSetsTheSameLimits(t *testing.T) {
	h := http.NotFoundHandler()
	srv := NewClearTextServer(h, Limits{ReadHeaderTimeout: time.Second, IdleTimeout: 2 * time.Second, MaxHeaderBytes: 3})
	if srv.ReadHeaderTimeout != time.Second || srv.IdleTimeout != 2*time.Second || srv.MaxHeaderBytes != 3 || srv.Handler == nil {
		t.Errorf("server limits = (%v, %v, %d), handler %v; want (1s, 2s, 3) and a handler", srv.ReadHeaderTimeout, srv.IdleTimeout, srv.MaxHeaderBytes, srv.Handler)
	}
	h2 := srv.HTTP2
	if h2 == nil || h2.Protocols == nil || !h2.Protocols.UnencryptedHTTP2() || h2.Protocols.HTTP1() || h2.Handler == nil {
		t.Fatalf("HTTP/2 server %+v, want one for h2c alone, with the handler", h2)
	}
	if h2.ReadHeaderTimeout != time.Second || h2.IdleTimeout != 2*time.Second || h2.MaxHeaderBytes != 3 || h2.ReadTimeout != 0 || h2.WriteTimeout != 0 {
		t.Errorf("HTTP/2 server limits = (%v, %v, %d, %v, %v), want (1s, 2s, 3) and no read or write timeout", h2.ReadHeaderTimeout, h2.IdleTimeout, h2.MaxHeaderBytes, h2.ReadTimeout, h2.WriteTimeout)
	}
	if d := NewClearTextServer(h, Limits{}); d.ReadHeaderTimeout != DefaultReadHeaderTimeout || d.IdleTimeout != DefaultIdleTimeout || d.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("zero Limits gave (%v, %v, %d), want the defaults", d.ReadHeaderTimeout, d.IdleTimeout, d.MaxHeaderBytes)
	}
}

func TestHeaders(t *testing.T) {
	eachServer(t, func(t *testing.T, startServer serverStarter) {
		const limit = 8 << 10
		srv := startServer(t, Limits{MaxHeaderBytes: limit}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		client := srv.Client()
		for _, tc := range []struct {
			name   string
			size   int
			status int
		}{
			{"within the limit are served", limit / 2, http.StatusOK},
			// net/http admits 4 KiB of slack beyond MaxHeaderBytes.
			{"beyond the limit get 431", 2 * limit, http.StatusRequestHeaderFieldsTooLarge},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Padding", strings.Repeat("a", tc.size))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("request: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.status {
					t.Errorf("status = %d, want %d", resp.StatusCode, tc.status)
				}
			})
		}
	})
}

func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	eachServer(t, func(t *testing.T, startServer serverStarter) {
		srv := startServer(t, Limits{IdleTimeout: 200 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok")
		}))
		c := dial(t, srv)
		c.send(t, "GET / HTTP/1.1\r\nHost: test\r\n\r\n")
		resp := c.response(t)
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("read response body: %v", err)
		}
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("status %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		// Send nothing more: the server must hang up, well before clientWait.
		if _, err := c.r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("idle connection read = %v, want EOF from the server closing it", err)
		}
	})
}
