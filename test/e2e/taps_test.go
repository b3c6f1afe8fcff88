package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// tappedEngine is an engine-sim process with an HTTP proxy in front of it on the same
// host, which records every adapter load and unload the engine is asked for. Its pods
// name the proxy's port in switchboard.dev/port, the port the manager (adapter admin API)
// and the scrapers (metrics, model listings) use, and the engine's own port as the
// container port their Service targets, which the gateway's requests take.
type tappedEngine struct {
	s                 *system
	host, engine, tap string // the host, the engine's and the proxy's addresses
	model             string
	flags             []string // further engine-sim flags, for a restart
	proc              *testenv.Process

	mu    sync.Mutex
	calls []adminCall
}

// adminCall is one request to load or unload an adapter, as the proxy saw it arrive and
// the engine answer it.
type adminCall struct {
	path, adapter string
	at, answered  time.Time
	status        int
}

// unload reports whether the call asked to unload an adapter.
func (c adminCall) unload() bool { return c.path == unloadPath }

// String describes the call.
func (c adminCall) String() string {
	return fmt.Sprintf("%s %s at %s, answered %d at %s", c.path, c.adapter, c.at.Format(time.StampMilli), c.status,
		c.answered.Format(time.StampMilli))
}

// The engine's adapter admin API, which the proxy records.
const (
	loadPath   = "/v1/load_lora_adapter"
	unloadPath = "/v1/unload_lora_adapter"
)

// startTappedEngine runs an engine-sim process serving model on a free port of host, and
// its proxy on another, until the test ends.
func (s *system) startTappedEngine(t testing.TB, host, model string, flags ...string) *tappedEngine {
	e := &tappedEngine{s: s, host: host, engine: testenv.FreeAddr(t, host), model: model, flags: flags}
	e.proc = s.runEngine(t, e.engine, model, flags...)
	ln := testenv.Listen(t, host)
	e.tap = ln.Addr().String()
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: e.engine})
	// An engine that is down answers 502 through the proxy, silently.
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	srv := &http.Server{Handler: e.recording(proxy)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

// recording records the adapter loads and unloads of the requests it passes to next. It
// reads their bodies as next streams them on, so that recording delays no call.
func (e *tappedEngine) recording(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || (r.URL.Path != loadPath && r.URL.Path != unloadPath) {
			next.ServeHTTP(w, r)
			return
		}
		call := adminCall{path: r.URL.Path, at: time.Now()}
		body := new(testenv.Buffer) // written by the proxy's transport, which may outlive ServeHTTP
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(r.Body, body), r.Body}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		var req struct {
			Name string `json:"lora_name"`
		}
		_ = json.Unmarshal([]byte(body.String()), &req)
		call.adapter, call.answered, call.status = req.Name, time.Now(), sw.status
		e.mu.Lock()
		e.calls = append(e.calls, call)
		e.mu.Unlock()
	})
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader remembers code and writes it.
func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// unloadCalls returns the unloads the engine was asked for so far.
func (e *tappedEngine) unloadCalls() []adminCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	var unloads []adminCall
	for _, c := range e.calls {
		if c.unload() {
			unloads = append(unloads, c)
		}
	}
	return unloads
}

// callsFor returns the loads and unloads of adapters the engine was asked for so far.
func (e *tappedEngine) callsFor(adapters []string) []adminCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	var calls []adminCall
	for _, c := range e.calls {
		if slices.Contains(adapters, c.adapter) {
			calls = append(calls, c)
		}
	}
	return calls
}

// crash kills the engine process, as an out-of-memory kill would.
func (e *tappedEngine) crash(t testing.TB) { e.proc.Kill(t) }

// restart starts the engine again on its address, without the adapters it had.
func (e *tappedEngine) restart(t testing.TB) {
	e.proc = e.s.runEngine(t, e.engine, e.model, e.flags...)
}

// pod registers a Pod ns/name for the engine, labelled with labels too, and marks it
// Running, and Ready if ready; its port label names the proxy, which the manager calls.
func (e *tappedEngine) pod(t testing.TB, ns, name string, labels map[string]string, ready bool) *corev1.Pod {
	_, tapPort, _ := net.SplitHostPort(e.tap)
	all := maps.Clone(labels)
	if all == nil {
		all = map[string]string{}
	}
	all[v1alpha1.LabelPort] = tapPort
	return e.s.cluster.EnginePodReady(t, ns, name, e.model, e.engine, all, ready)
}

// models returns the models the engine lists: its base model and loaded adapters.
func (e *tappedEngine) models() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.engine+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New("list models: " + resp.Status)
	}
	var list struct {
		Data []struct{ ID string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}
