package cache

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeEngine serves /metrics and a /v1/models listing the test can change.
type fakeEngine struct {
	*httptest.Server
	// scrapes and listings count the /metrics and /v1/models requests received, conns
	// the connections accepted.
	scrapes, listings, conns atomic.Int64

	mu     sync.Mutex
	models []ListedModel
	status int // of /v1/models when not 200
}

func newFakeEngine(t *testing.T, models []ListedModel) *fakeEngine {
	t.Helper()
	e := &fakeEngine{models: models}
	e.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			e.scrapes.Add(1)
			_, _ = io.WriteString(w, runningBody(1))
			return
		}
		e.listings.Add(1)
		e.mu.Lock()
		status, models := e.status, e.models
		e.mu.Unlock()
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": models})
	}))
	e.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.conns.Add(1)
		}
	}
	e.Start()
	t.Cleanup(e.Close)
	return e
}

// set changes the listing, or with status other than 0 the answer to /v1/models.
func (e *fakeEngine) set(status int, models []ListedModel) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status, e.models = status, models
}

// servedBy reports whether model is routed to pod name.
func servedBy(c *Cache, model, name string) bool {
	return slices.Contains(podNames(c.Reader, model), name)
}

func TestScraperListsModels(t *testing.T) {
	const refresh = 200 * time.Millisecond
	engine := newFakeEngine(t, append(listed("sql", "chat"), ListedModel{ID: "foreign", Parent: "qwen"}))
	c := New()
	c.UpsertPod(makePod("a").ServedBy(engine.Server).Build())
	s, _ := startScraper(t, c, ScrapeOptions{Interval: 10 * time.Millisecond, ModelsRefreshInterval: refresh})

	waitUntil(t, "the listed adapters are served", func() bool { return servedBy(c, "sql", "a") && servedBy(c, "chat", "a") })
	if m, _ := c.Model("sql"); m.BaseModel != "llama" {
		t.Errorf("Model(sql).BaseModel = %q, want llama", m.BaseModel)
	}
	if _, ok := c.Model("foreign"); ok {
		t.Error("an adapter of another base model is served")
	}

	// The engine unloads sql behind the manager's back. The listing in flight, if any,
	// may predate the change; the one after it was requested after the change, and once
	// it is recorded sql MUST be gone: within one refresh, counted in listings, not time.
	engine.set(0, listed("chat"))
	recorded := s.Stats().ListingsSucceeded
	waitUntil(t, "two more listings are recorded", func() bool { return s.Stats().ListingsSucceeded >= recorded+2 })
	if servedBy(c, "sql", "a") {
		t.Error("sql is still served after a listing requested after the engine dropped it")
	}
	if !servedBy(c, "chat", "a") {
		t.Error("chat is no longer served")
	}
	if st := s.Stats(); st.ListingsSucceeded < 2 || st.ListingsFailed != 0 {
		t.Errorf("Stats() = %+v, want at least 2 listings and no failure", st)
	}
}

func TestScraperListingFailureKeepsTheLastListing(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
		models []ListedModel
	}{
		{name: "status 500", status: http.StatusInternalServerError},
		{name: "no data", models: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			engine := newFakeEngine(t, listed("sql"))
			c := New()
			c.UpsertPod(makePod("a").ServedBy(engine.Server).Build())
			s, _ := startScraper(t, c, ScrapeOptions{Interval: 5 * time.Millisecond, ModelsRefreshInterval: 10 * time.Millisecond})
			waitUntil(t, "sql is served", func() bool { return servedBy(c, "sql", "a") })

			engine.set(tt.status, tt.models)
			failed := s.Stats().ListingsFailed
			waitUntil(t, "three listings fail", func() bool { return s.Stats().ListingsFailed >= failed+3 })
			if !servedBy(c, "sql", "a") {
				t.Error("sql is no longer served after failed listings; want the last listing kept")
			}
		})
	}
}

func TestScraperSkipsEnginesThatRefuseListing(t *testing.T) {
	engine := newFakeEngine(t, listed("chat"))
	c := New()
	c.UpsertPod(makePod("a").ServedBy(engine.Server).Build())
	c.SetAdapterInstances(podKey("sql"), "llama", []string{"a"})
	const refresh = 10 * time.Millisecond
	s, _ := startScraper(t, c, ScrapeOptions{Interval: 5 * time.Millisecond, ModelsRefreshInterval: refresh})
	waitUntil(t, "chat is served from the listing", func() bool { return servedBy(c, "chat", "a") })
	if servedBy(c, "sql", "a") {
		t.Fatal("sql is served though the engine's listing lacks it")
	}

	// The engine now wants an API key: its listing is forgotten and placement decides.
	engine.set(http.StatusUnauthorized, nil)
	waitUntil(t, "placement decides again", func() bool { return servedBy(c, "sql", "a") && !servedBy(c, "chat", "a") })
	// Counted in scrape rounds, not time: 10 rounds are 5 refreshes, well inside the
	// backoff, and the engine must not be asked for its listing during them.
	refused, scraped := engine.listings.Load(), engine.scrapes.Load()
	waitUntil(t, "10 more scrape rounds", func() bool { return engine.scrapes.Load() >= scraped+10 })
	if n := engine.listings.Load(); n != refused {
		t.Errorf("the engine was asked %d more times within 10 scrape rounds of refusing, want 0 (backoff %d refreshes)",
			n-refused, unauthorizedBackoff)
	}
	if st := s.Stats(); st.ListingsUnauthorized != 1 || st.ListingsFailed != 0 {
		t.Errorf("Stats() = %+v, want 1 unauthorized listing and no failure", st)
	}
}

func TestScraperListsAMovedPodAtOnce(t *testing.T) {
	first, second := newFakeEngine(t, listed("sql")), newFakeEngine(t, listed("chat"))
	c := New()
	c.UpsertPod(makePod("a").ServedBy(first.Server).Build())
	// A long refresh interval: only the move can trigger the second listing.
	startScraper(t, c, ScrapeOptions{Interval: 5 * time.Millisecond, ModelsRefreshInterval: time.Hour})
	waitUntil(t, "sql is served", func() bool { return servedBy(c, "sql", "a") })
	c.UpsertPod(makePod("a").ServedBy(second.Server).Build())
	waitUntil(t, "the new address's listing is read", func() bool { return servedBy(c, "chat", "a") && !servedBy(c, "sql", "a") })
}
