package cache

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

// waitUntil polls cond every 10ms and fails the test if it does not hold within 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startScraper runs a scraper of c until stop is called or the test ends. stop cancels
// Start's context, waits for Start to return and checks that it returned nil.
func startScraper(t *testing.T, c *Cache, opts ScrapeOptions) (s *Scraper, stop func()) {
	t.Helper()
	s = NewScraper(c, opts)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Start returned %v, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Start did not return after its context was cancelled")
			}
		})
	}
	t.Cleanup(stop)
	return s, stop
}

// podKey returns the key of the pod named name in makePod's namespace.
func podKey(name string) endpoint.Key { return endpoint.Key{Namespace: "ns", Name: name} }

// podMetrics returns the latest metrics of the pod named name, or nil.
func podMetrics(c *Cache, name string) *endpoint.Metrics {
	p, ok := c.Pod(podKey(name))
	if !ok {
		return nil
	}
	return p.Metrics()
}

// waitForScrapes waits until the pod named name has been scraped n more times, checking
// every snapshot it sees with check (which may be nil).
func waitForScrapes(t *testing.T, c *Cache, name string, n int, check func(*endpoint.Metrics)) {
	t.Helper()
	var last time.Time
	seen := -1 // the snapshot present at the start does not count
	waitUntil(t, fmt.Sprintf("pod %s is scraped %d times", name, n), func() bool {
		m := podMetrics(c, name)
		if m == nil {
			return false
		}
		if check != nil {
			check(m)
		}
		if !m.ScrapedAt.Equal(last) {
			last = m.ScrapedAt
			seen++
		}
		return seen >= n
	})
}

// ServedBy points the pod at the address and port srv listens on.
func (b *podBuilder) ServedBy(srv *httptest.Server) *podBuilder {
	addr := srv.Listener.Addr().(*net.TCPAddr)
	b.ep.Address = addr.IP.String()
	b.ep.Port = int32(addr.Port)
	return b
}

// runningBody is a minimal vLLM /metrics body reporting n running requests.
func runningBody(n int) string {
	return fmt.Sprintf("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running %d\n", n)
}

// metricsServer serves body as /metrics on a loopback port until the test ends.
func metricsServer(t *testing.T, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// hangingServer is a /metrics server that never answers: each request blocks until the
// client gives up or the test ends. Other paths, such as /v1/models, answer 404 at once.
type hangingServer struct {
	*httptest.Server
	// requests counts the /metrics requests received; gaveUp those the client abandoned.
	requests, gaveUp atomic.Int64
}

func newHangingServer(t *testing.T) *hangingServer {
	t.Helper()
	h := &hangingServer{}
	release := make(chan struct{})
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		h.requests.Add(1)
		select {
		case <-r.Context().Done():
			h.gaveUp.Add(1)
		case <-release:
		}
	}))
	// Cleanups run last-in first-out: release the handlers, then close the server, which
	// waits for them.
	t.Cleanup(h.Close)
	t.Cleanup(func() { close(release) })
	return h
}

// podNetwork routes connections for pod addresses ("10.0.0.1:8000") to loopback test
// servers, so that pods in a test can have distinct IPs.
type podNetwork map[string]*httptest.Server

// dial connects to the test server of the pod address addr; it is a ScrapeOptions.Dial.
func (n podNetwork) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	srv, ok := n[addr]
	if !ok {
		return nil, fmt.Errorf("no route to %s", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, srv.Listener.Addr().String())
}

func TestScraperScrapesEngine(t *testing.T) {
	cfg := enginesim.DefaultConfig()
	cfg.BlockSize, cfg.KVBlocks, cfg.MaxLoRAs = 32, 1234, 3
	engine, err := enginesim.NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(engine.Handler())
	t.Cleanup(srv.Close)
	// Pods that are not routable must never be scraped.
	var unroutableRequests atomic.Int64
	unroutable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		unroutableRequests.Add(1)
		_, _ = io.WriteString(w, runningBody(1))
	}))
	t.Cleanup(unroutable.Close)

	c := New()
	c.UpsertPod(makePod("engine").ServedBy(srv).Build())
	c.UpsertPod(makePod("not-ready").ServedBy(unroutable).NotReady().Build())
	c.UpsertPod(makePod("terminating").ServedBy(unroutable).Terminating().Build())
	s, _ := startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond})

	before := time.Now()
	waitForScrapes(t, c, "engine", 3, nil)
	m := podMetrics(c, "engine")
	if m.BlockSize != 32 || m.NumGPUBlocks != 1234 || m.LoRA.MaxLoRA != 3 || m.Running != 0 || m.KVCacheUsage != 0 {
		t.Errorf("metrics = %+v, want block size 32, 1234 GPU blocks, max LoRA 3, idle", m)
	}
	if m.ScrapedAt.Before(before) {
		t.Errorf("ScrapedAt = %v, before the scraper started at %v", m.ScrapedAt, before)
	}
	if st := s.Stats(); st.Succeeded < 3 || st.Failed != 0 {
		t.Errorf("Stats() = %+v, want at least 3 succeeded and none failed", st)
	}
	if n := unroutableRequests.Load(); n != 0 {
		t.Errorf("unroutable pods were scraped %d times, want 0", n)
	}
	for _, name := range []string{"not-ready", "terminating"} {
		if m := podMetrics(c, name); m != nil {
			t.Errorf("pod %s has metrics %+v, want none", name, m)
		}
	}
}

// hangingAndHealthyPods returns a cache with pod "hanging", served by the returned
// server that never answers, and pod "healthy", whose engine reports one running request.
func hangingAndHealthyPods(t *testing.T) (*Cache, *hangingServer) {
	hanging := newHangingServer(t)
	healthy := metricsServer(t, runningBody(1))
	c := New()
	c.UpsertPod(makePod("hanging").ServedBy(hanging.Server).Build())
	c.UpsertPod(makePod("healthy").ServedBy(healthy).Build())
	return c, hanging
}

func TestScraperHangingEndpointDoesNotDelayOthers(t *testing.T) {
	c, hanging := hangingAndHealthyPods(t)
	s, _ := startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond, Timeout: 200 * time.Millisecond})

	waitUntil(t, "the hanging pod is being scraped", func() bool { return hanging.requests.Load() > 0 })
	waitForScrapes(t, c, "healthy", 3, nil)
	// The hanging scrape times out, counts as failed and is retried.
	waitUntil(t, "the hanging scrape fails and is retried", func() bool {
		return s.Stats().Failed > 0 && hanging.requests.Load() > 1
	})
	if m := podMetrics(c, "hanging"); m != nil {
		t.Errorf("hanging pod has metrics %+v, want none", m)
	}
}

func TestScraperHangingEnginesDoNotStarveOthers(t *testing.T) {
	c := New()
	for i := range 4 {
		c.UpsertPod(makePod(fmt.Sprintf("hanging-%d", i)).ServedBy(newHangingServer(t).Server).Build())
	}
	c.UpsertPod(makePod("healthy").ServedBy(metricsServer(t, runningBody(1))).Build())
	// Twice as many hanging engines as slots: only the timeout frees their slots.
	s, _ := startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond, Timeout: 50 * time.Millisecond, MaxConcurrent: 2})

	waitForScrapes(t, c, "healthy", 10, nil)
	if st := s.Stats(); st.Failed == 0 {
		t.Errorf("Stats() = %+v, want the hanging engines' scrapes to have failed", st)
	}
}

func TestScraperKeepsOneConnectionPerEngine(t *testing.T) {
	// More engines than http.DefaultTransport keeps idle connections for (100).
	engines := make([]*fakeEngine, 120)
	c := New()
	for i := range engines {
		engines[i] = newFakeEngine(t, nil)
		c.UpsertPod(makePod(fmt.Sprintf("p%d", i)).ServedBy(engines[i].Server).Build())
	}
	// A scrape that timed out would rightly close its connection: leave time enough.
	startScraper(t, c, ScrapeOptions{Interval: 50 * time.Millisecond, ModelsRefreshInterval: 100 * time.Millisecond, Timeout: time.Minute})

	waitUntil(t, "every engine is scraped 10 times and listed 3 times", func() bool {
		return !slices.ContainsFunc(engines, func(e *fakeEngine) bool { return e.scrapes.Load() < 10 || e.listings.Load() < 3 })
	})
	for i, e := range engines {
		if n := e.conns.Load(); n != 1 {
			t.Errorf("engine %d accepted %d connections for %d scrapes and %d listings, want 1",
				i, n, e.scrapes.Load(), e.listings.Load())
		}
	}
}

func TestScraperReplacesConnectionsEnginesClose(t *testing.T) {
	// The engine closes every connection idle for a millisecond, silently: a scrape on a
	// connection kept from the last one finds it closed, and must try again on a new one
	// rather than fail.
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			_, _ = io.WriteString(w, runningBody(1))
			return
		}
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	srv.Config.IdleTimeout = time.Millisecond
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := New()
	c.UpsertPod(makePod("p").ServedBy(srv).Build())
	s, _ := startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond, ModelsRefreshInterval: 20 * time.Millisecond})

	waitUntil(t, "the engine has closed 5 connections the scraper kept", func() bool { return conns.Load() > 5 })
	if st := s.Stats(); st.Failed != 0 || st.ListingsFailed != 0 {
		t.Errorf("Stats() = %+v, want no failure", st)
	}
}

func TestScraperBacksOffFailingEngines(t *testing.T) {
	var (
		failing  atomic.Bool
		requests atomic.Int64
	)
	failing.Store(true)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		requests.Add(1)
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, runningBody(1))
	}))
	t.Cleanup(flaky.Close)
	witness := newFakeEngine(t, nil)
	c := New()
	c.UpsertPod(makePod("flaky").ServedBy(flaky).Build())
	c.UpsertPod(makePod("witness").ServedBy(witness.Server).Build())
	startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond})

	// Counted in the witness's scrapes, at most one an interval, not in time: over 64
	// intervals, an engine failing throughout is asked 7 times (after 1, 2, 4, … skipped
	// intervals), where one that does not back off would be asked 64 times.
	waitUntil(t, "the witness is scraped 64 times", func() bool { return witness.scrapes.Load() >= 64 })
	if n := requests.Load(); n > 64/3 {
		t.Errorf("the failing engine was asked %d times while the witness was scraped 64 times, want at most %d", n, 64/3)
	}

	// The first successful scrape ends the backoff.
	failing.Store(false)
	waitUntil(t, "the engine that recovered is scraped", func() bool { return podMetrics(c, "flaky") != nil })
	asked, scraped := requests.Load(), witness.scrapes.Load()
	waitUntil(t, "the witness is scraped 20 more times", func() bool { return witness.scrapes.Load() >= scraped+20 })
	if n := requests.Load() - asked; n < 10 {
		t.Errorf("the engine that recovered was scraped %d times while the witness was scraped 20 times, want about as many", n)
	}
}

func TestNextDue(t *testing.T) {
	due := time.Unix(1000, 0)
	const interval = 100 * time.Millisecond
	tests := []struct {
		name  string
		after time.Duration // after due
		want  time.Duration // after due
	}{
		{"at the due time", 0, interval},
		{"early in the interval", 3 * time.Millisecond, interval},
		{"at the next due time", interval, 2 * interval},
		{"two and a half intervals late", 5 * interval / 2, 3 * interval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextDue(due, due.Add(tt.after), interval); !got.Equal(due.Add(tt.want)) {
				t.Errorf("nextDue(due, due+%v) = due+%v, want due+%v", tt.after, got.Sub(due), tt.want)
			}
		})
	}
}

func TestFirstDue(t *testing.T) {
	epoch := time.Unix(1000, 0)
	const interval = 100 * time.Millisecond
	const slot = interval / phaseSlots
	tests := []struct {
		name  string
		now   time.Duration // after epoch
		phase int
		want  time.Duration // after epoch
	}{
		{"at the epoch, phase 0", 0, 0, 0},
		{"at the epoch, last phase", 0, phaseSlots - 1, interval - slot},
		{"phase still ahead in this interval", 3 * slot / 2, 2, 2 * slot},
		{"phase passed in this interval", 3 * slot / 2, 1, interval + slot},
		{"at the phase itself", 7*interval + 3*slot, 3, 7*interval + 3*slot},
		{"just after the phase", 7*interval + 3*slot + 1, 3, 8*interval + 3*slot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := firstDue(epoch, epoch.Add(tt.now), interval, tt.phase)
			if !got.Equal(epoch.Add(tt.want)) {
				t.Errorf("firstDue(epoch, epoch+%v, %v, %d) = epoch+%v, want epoch+%v",
					tt.now, interval, tt.phase, got.Sub(epoch), tt.want)
			}
		})
	}
}

// countingDialer dials TCP and counts the connections it has open, from dialing to
// closing.
type countingDialer struct {
	open, maxOpen, dialed atomic.Int64
}

func (c *countingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.dialed.Add(1)
	n := c.open.Add(1)
	for m := c.maxOpen.Load(); n > m && !c.maxOpen.CompareAndSwap(m, n); m = c.maxOpen.Load() {
	}
	return &closeNotifier{Conn: conn, onClose: func() { c.open.Add(-1) }}, nil
}

// closeNotifier calls onClose once, when the connection is first closed.
type closeNotifier struct {
	net.Conn
	once    sync.Once
	onClose func()
}

func (c *closeNotifier) Close() error {
	c.once.Do(c.onClose)
	return c.Conn.Close()
}

func TestScraperBoundsConcurrency(t *testing.T) {
	c := New()
	for i := range 5 {
		// Scrapes and listings alike hang until the scraper gives up.
		srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
		t.Cleanup(srv.Close)
		c.UpsertPod(makePod(fmt.Sprintf("hanging-%d", i)).ServedBy(srv).Build())
	}
	// Count on the client side: a server may notice an abandoned request only after the
	// scraper has moved on, so it could briefly see more requests than the scraper has
	// open. A request that times out closes its connection, so with every request
	// hanging, the connections open are the requests in flight.
	counter := &countingDialer{}
	startScraper(t, c, ScrapeOptions{
		Interval:      10 * time.Millisecond,
		Timeout:       50 * time.Millisecond,
		MaxConcurrent: 2,
		Dial:          counter.dial,
	})

	// Every scrape times out, so slots are freed and taken again many times.
	waitUntil(t, "12 scrapes have started", func() bool { return counter.dialed.Load() >= 12 })
	if got := counter.maxOpen.Load(); got != 2 {
		t.Errorf("at most %d scrapes were open at once, want 2", got)
	}
}

func TestScraperStopsWhenPodGoesAway(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Cache)
	}{
		{"deleted", func(c *Cache) { c.DeletePod(podKey("p")) }},
		{"not ready", func(c *Cache) { c.UpsertPod(makePod("p").IP("10.0.0.1").NotReady().Build()) }},
		{"terminating", func(c *Cache) { c.UpsertPod(makePod("p").IP("10.0.0.1").Terminating().Build()) }},
		{"moved", func(c *Cache) { c.UpsertPod(makePod("p").IP("10.0.0.2").Build()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hanging := newHangingServer(t)
			network := podNetwork{
				"10.0.0.1:8000": hanging.Server,
				"10.0.0.2:8000": metricsServer(t, runningBody(2)),
				"10.0.0.3:8000": metricsServer(t, runningBody(3)),
			}
			c := New()
			c.UpsertPod(makePod("p").IP("10.0.0.1").Build())
			c.UpsertPod(makePod("witness").IP("10.0.0.3").Build())
			// The timeout is far longer than the test: only the change can end the scrape.
			startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond, Timeout: time.Hour, Dial: network.dial})

			waitUntil(t, "the pod is being scraped", func() bool { return hanging.requests.Load() == 1 })
			tt.change(c)
			waitUntil(t, "the scrape is abandoned", func() bool { return hanging.gaveUp.Load() == 1 })
			// Let a few rounds pass, as witnessed by another pod's scrapes, then check that
			// the old address was not scraped again.
			waitForScrapes(t, c, "witness", 3, nil)
			if n := hanging.requests.Load(); n != 1 {
				t.Errorf("old address received %d requests, want 1", n)
			}
		})
	}
}

func TestScraperFollowsAddressChange(t *testing.T) {
	network := podNetwork{
		"10.0.0.1:8000": metricsServer(t, runningBody(1)),
		"10.0.0.2:8000": metricsServer(t, runningBody(2)),
	}
	c := New()
	c.UpsertPod(makePod("p").IP("10.0.0.1").Build())
	startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond, Dial: network.dial})
	waitUntil(t, "the first address is scraped", func() bool {
		m := podMetrics(c, "p")
		return m != nil && m.Running == 1
	})

	// Scrapes of the old address may be in flight; none of them may land on the new one.
	c.UpsertPod(makePod("p").IP("10.0.0.2").Build())
	waitForScrapes(t, c, "p", 3, func(m *endpoint.Metrics) {
		if m.Running != 2 {
			t.Fatalf("after the address change, metrics report %v running requests, want 2 (from the new address)", m.Running)
		}
	})
}

func TestScraperFailures(t *testing.T) {
	fixture, err := os.ReadFile(filepath.Join("testdata", "vllm.txt"))
	if err != nil {
		t.Fatal(err)
	}
	respond := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc // nil: nothing listens on the pod's port
		engine  endpoint.Engine
		opts    ScrapeOptions
	}{
		{name: "status 500", handler: respond(http.StatusInternalServerError, runningBody(1))},
		{name: "garbage body", handler: respond(http.StatusOK, "vllm:num_requests_running{ seven\n")},
		{name: "body too large", handler: respond(http.StatusOK, string(fixture)), opts: ScrapeOptions{MaxBodyBytes: int64(len(fixture)) - 1}},
		{name: "unknown engine", handler: respond(http.StatusOK, runningBody(1)), engine: "tgi"},
		{name: "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := makePod("p")
			if tt.handler != nil {
				srv := httptest.NewServer(tt.handler)
				t.Cleanup(srv.Close)
				pod.ServedBy(srv)
			} else {
				// Take a free port, then stop listening on it.
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := l.Addr().(*net.TCPAddr)
				l.Close()
				pod.IP(addr.IP.String()).ep.Port = int32(addr.Port)
			}
			if tt.engine != "" {
				pod.ep.Engine = tt.engine
			}
			c := New()
			c.UpsertPod(pod.Build())
			opts := tt.opts
			opts.Interval = 10 * time.Millisecond
			s, _ := startScraper(t, c, opts)

			waitUntil(t, "two scrapes fail", func() bool { return s.Stats().Failed >= 2 })
			if m := podMetrics(c, "p"); m != nil {
				t.Errorf("Metrics() = %+v, want nil", m)
			}
			if n := s.Stats().Succeeded; n != 0 {
				t.Errorf("Stats().Succeeded = %d, want 0", n)
			}
		})
	}
}

func TestScraperBodyAtLimitParses(t *testing.T) {
	fixture, err := os.ReadFile(filepath.Join("testdata", "vllm.txt"))
	if err != nil {
		t.Fatal(err)
	}
	c := New()
	c.UpsertPod(makePod("p").ServedBy(metricsServer(t, string(fixture))).Build())
	startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond, MaxBodyBytes: int64(len(fixture))})
	waitUntil(t, "the pod is scraped", func() bool { return podMetrics(c, "p") != nil })
	if m := podMetrics(c, "p"); m.Running != 7 || m.NumGPUBlocks != 27910 {
		t.Errorf("Metrics() = %+v, want the fixture's 7 running requests and 27910 GPU blocks", m)
	}
}

func TestScraperKeepsLastSnapshotOnFailure(t *testing.T) {
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, runningBody(4))
	}))
	t.Cleanup(srv.Close)
	c := New()
	c.UpsertPod(makePod("p").ServedBy(srv).Build())
	s, _ := startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond})

	waitUntil(t, "the pod is scraped", func() bool { return podMetrics(c, "p") != nil })
	failing.Store(true)
	failed := s.Stats().Failed
	waitUntil(t, "two scrapes fail", func() bool { return s.Stats().Failed >= failed+2 })
	// A scrape that started before the switch may still have succeeded; after that, the
	// snapshot stays put while every scrape fails.
	last := podMetrics(c, "p")
	failed = s.Stats().Failed
	waitUntil(t, "two more scrapes fail", func() bool { return s.Stats().Failed >= failed+2 })
	if got := podMetrics(c, "p"); got != last || got.Running != 4 {
		t.Errorf("Metrics() = %+v, want the last good snapshot %+v", got, last)
	}
}

func TestScraperShutdown(t *testing.T) {
	c, hanging := hangingAndHealthyPods(t)
	s, stop := startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond, Timeout: time.Hour})

	waitUntil(t, "the hanging pod is being scraped", func() bool { return hanging.requests.Load() == 1 })
	waitForScrapes(t, c, "healthy", 1, nil)
	stop()
	// Start waited for the scrape goroutines; the server sees the abandoned request soon.
	waitUntil(t, "the in-flight scrape is abandoned", func() bool { return hanging.gaveUp.Load() == 1 })
	if n := s.Stats().Failed; n != 0 {
		t.Errorf("Stats().Failed = %d, want 0: scrapes abandoned at shutdown are not failures", n)
	}
	// goleak in TestMain checks that no scrape or connection goroutine is left behind.
}

func TestScrapeOptionsDefaults(t *testing.T) {
	got := ScrapeOptions{Timeout: -1, MaxConcurrent: 5}.withDefaults()
	want := ScrapeOptions{
		Interval:              DefaultScrapeInterval,
		ModelsRefreshInterval: DefaultModelsRefreshInterval,
		Timeout:               DefaultScrapeTimeout,
		MaxConcurrent:         5,
		MaxBodyBytes:          DefaultScrapeMaxBodyBytes,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("withDefaults() = %+v, want %+v", got, want)
	}
	if NewScraper(New(), ScrapeOptions{}).NeedLeaderElection() {
		t.Error("NeedLeaderElection() = true, want false: every replica scrapes")
	}
}

func TestScraperSkipsUnwantedPods(t *testing.T) {
	a, b := newFakeEngine(t, nil), newFakeEngine(t, nil)
	c := New()
	c.UpsertPod(makePod("a").ServedBy(a.Server).Build())
	c.UpsertPod(makePod("b").ServedBy(b.Server).Build())
	var wantA, wantB atomic.Bool
	var version atomic.Uint64 // bumped with every change of the answers
	wantA.Store(true)
	wanted := func(p *Pod) bool {
		if p.Key.Name == "a" {
			return wantA.Load()
		}
		return wantB.Load()
	}
	startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond, ModelsRefreshInterval: 20 * time.Millisecond,
		Wanted: func() (func(*Pod) bool, uint64) { return wanted, version.Load() }})

	waitUntil(t, "a is scraped 5 times and listed", func() bool { return a.scrapes.Load() >= 5 && a.listings.Load() >= 1 })
	if n, l := b.scrapes.Load(), b.listings.Load(); n+l != 0 {
		t.Errorf("unwanted b was scraped %d and listed %d times", n, l)
	}
	wantB.Store(true)
	wantA.Store(false)
	version.Add(1)
	waitUntil(t, "b is scraped once it is wanted", func() bool { return b.scrapes.Load() >= 1 })
	stopped := a.scrapes.Load()
	waitUntil(t, "b is scraped 5 more times", func() bool { return b.scrapes.Load() >= 6 })
	if n := a.scrapes.Load(); n > stopped+1 { // one flight may have been on its way
		t.Errorf("a, no longer wanted, was scraped %d more times", n-stopped)
	}
}

// Until an engine is seen queueing, its profile's slots are those its command line
// declares; a queue seen with fewer running (its KV cache full) is the truth after that.
func TestScraperStartsFromDeclaredSlots(t *testing.T) {
	idle := metricsServer(t, runningBody(3))
	queueing := metricsServer(t, runningBody(5)+"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\n")
	c := New()
	declared := func(name string, srv *httptest.Server, slots int) endpoint.Endpoint {
		ep := makePod(name).ServedBy(srv).Build()
		ep.Slots = slots
		return ep
	}
	c.UpsertPod(declared("declared", idle, 8))
	c.UpsertPod(declared("undeclared", idle, 0))
	c.UpsertPod(declared("queueing", queueing, 8))
	startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond})

	for name, want := range map[string]float64{"declared": 8, "undeclared": 0, "queueing": 5} {
		waitForScrapes(t, c, name, 2, nil)
		if got := podMetrics(c, name).Profile.Slots; got != want {
			t.Errorf("pod %s: Profile.Slots = %g, want %g", name, got, want)
		}
	}
}
