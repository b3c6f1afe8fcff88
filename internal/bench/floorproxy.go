package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// The go-net-http row of the proxy section is the least that a reverse proxy built on
// Go's HTTP stack does: net/http's server takes the request, reads its body whole,
// http.Transport sends it to the engine on a keep-alive connection, and the answer is
// copied back. It neither parses nor routes, so the gateway's distance to nginx splits
// into what Go's HTTP stack costs and what the gateway does on top of it.

// floorProxyHandler returns the handler of that proxy to engine (host:port).
func floorProxyHandler(engine string) http.Handler {
	transport := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// One buffer of the announced length, so that a long body is not copied as the
		// buffer grows.
		body := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+bytes.MinRead))
		if _, err := body.ReadFrom(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+engine+r.URL.RequestURI(), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := transport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
}

// ServeFloorProxy serves floorProxyHandler(engine) on addr until ctx ends. The proxy
// section runs it in a process of its own: bin/bench -serve-floor-proxy.
func ServeFloorProxy(ctx context.Context, addr, engine string) error {
	srv := &http.Server{Addr: addr, Handler: floorProxyHandler(engine), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startFloorProxy runs the go-net-http proxy to engine in a process of its own: this
// program, re-executed with -serve-floor-proxy.
func startFloorProxy(_ context.Context, dir, engine string) (*process, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	p, err := startProcess("go-net-http", filepath.Join(dir, "go-net-http.log"), nil, self,
		"-serve-floor-proxy", addr, "-floor-proxy-engine", engine)
	return p, addr, err
}
