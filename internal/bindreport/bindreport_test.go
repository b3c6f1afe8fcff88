package bindreport_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-llm/switchboard/internal/bindreport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replica is a gateway replica's metrics endpoint serving a report that the test sets.
type replica struct {
	srv    *httptest.Server
	mu     sync.Mutex
	report bindreport.Report
}

func newReplica(t *testing.T, unbound ...bindreport.Failure) *replica {
	r := &replica{report: bindreport.Report{Unbound: unbound}}
	mux := http.NewServeMux()
	mux.Handle(bindreport.Path, bindreport.Handler(func() bindreport.Report {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.report
	}))
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *replica) set(unbound ...bindreport.Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report = bindreport.Report{Unbound: unbound}
}

func (r *replica) endpoint() string { return strings.TrimPrefix(r.srv.URL, "http://") }

// TestPollerMergesReplicasAndAnnouncesChanges checks that the poller keeps the failures
// every answering replica reports, each named with its replica, ignores a replica that
// does not answer, and announces the changes.
func TestPollerMergesReplicasAndAnnouncesChanges(t *testing.T) {
	unusable := bindreport.Addr{IP: "203.0.113.1", Port: 8080}
	taken := bindreport.Addr{IP: "127.0.0.41", Port: 80}
	a := newReplica(t, bindreport.Failure{Addr: unusable, Error: "bind: cannot assign requested address"})
	b := newReplica(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()

	p := bindreport.NewPoller(bindreport.PollerOptions{
		Endpoints: []string{a.endpoint(), b.endpoint(), deadAddr},
		Interval:  10 * time.Millisecond,
		Timeout:   time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()

	wait := func(what string, ok func(map[bindreport.Addr]string) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !ok(p.Unbound()) {
			select {
			case <-p.Events():
			case <-deadline:
				t.Fatalf("%s: Unbound() = %v", what, p.Unbound())
			}
		}
	}
	wait("one replica's failure", func(u map[bindreport.Addr]string) bool {
		return len(u) == 1 && u[unusable] == "gateway "+a.endpoint()+": bind: cannot assign requested address"
	})

	b.set(bindreport.Failure{Addr: taken, Error: "bind: address already in use"})
	wait("both replicas' failures", func(u map[bindreport.Addr]string) bool {
		return len(u) == 2 && strings.HasPrefix(u[taken], "gateway "+b.endpoint()+": ")
	})
	a.set()
	b.srv.Close() // a replica that stops answering reports nothing
	wait("no failure", func(u map[bindreport.Addr]string) bool { return len(u) == 0 })
}

func TestHandlerAnswersGetOnly(t *testing.T) {
	h := bindreport.Handler(func() bindreport.Report { return bindreport.Report{Unbound: []bindreport.Failure{}} })
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, bindreport.Path, nil))
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"unbound":[]}` || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("GET: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, bindreport.Path, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", rec.Code)
	}
}
