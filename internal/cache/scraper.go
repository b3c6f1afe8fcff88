package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// Defaults applied by ScrapeOptions for fields left zero.
const (
	DefaultScrapeInterval      = 100 * time.Millisecond
	DefaultScrapeTimeout       = time.Second
	DefaultScrapeMaxConcurrent = 32
	DefaultScrapeMaxBodyBytes  = 4 << 20
)

// ScrapeOptions configure a Scraper. The zero value is valid: every field left zero or
// negative takes its default.
type ScrapeOptions struct {
	// Interval is the time between two scrapes of one endpoint, measured from the start
	// of one scheduling round to the next. Defaults to DefaultScrapeInterval.
	Interval time.Duration
	// Timeout bounds one scrape, from dialing to the end of parsing. A scrape that takes
	// longer fails and frees its concurrency slot. Defaults to DefaultScrapeTimeout.
	Timeout time.Duration
	// MaxConcurrent bounds the number of scrapes in flight across all endpoints. When
	// every slot is taken, the remaining endpoints are skipped until a later round.
	// Defaults to DefaultScrapeMaxConcurrent.
	MaxConcurrent int
	// MaxBodyBytes bounds the size of a /metrics response; a larger response fails the
	// scrape rather than being parsed in part. Defaults to DefaultScrapeMaxBodyBytes.
	MaxBodyBytes int64
	// Client, if set, sends the scrape requests; it SHOULD NOT have a Timeout of its own
	// shorter than Timeout. The Scraper never closes a caller's client's connections. When
	// nil, the Scraper uses a client of its own whose idle connections are closed when
	// Start returns.
	Client *http.Client
}

// withDefaults returns o with every zero or negative field replaced by its default.
func (o ScrapeOptions) withDefaults() ScrapeOptions {
	if o.Interval <= 0 {
		o.Interval = DefaultScrapeInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultScrapeTimeout
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultScrapeMaxConcurrent
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultScrapeMaxBodyBytes
	}
	return o
}

// ScrapeStats counts completed scrapes since the Scraper was created.
type ScrapeStats struct {
	// Succeeded counts scrapes whose snapshot was stored in the cache. A snapshot the
	// cache discards, because its pod changed address or went away meanwhile, is not
	// counted.
	Succeeded uint64
	// Failed counts scrapes that failed: the endpoint could not be reached, timed out,
	// answered with a status other than 200 or with a body that is too large or does not
	// parse. Scrapes the Scraper abandons itself, because their pod went away or the
	// Scraper stopped, are not counted.
	Failed uint64
}

// Scraper periodically scrapes the /metrics endpoint of every routable pod in a Cache
// and stores the parsed snapshots with Cache.SetMetrics. A failed scrape leaves the
// previous snapshot in place, so that it ages into staleness (see endpoint.Metrics.Stale).
// Create it with NewScraper and run it with Start, typically by adding it to a
// controller-runtime manager; it runs on every replica, not only on the leader.
//
// Synchronisation model: the goroutine running Start owns all scheduling state (the
// in-flight map) and is the only one to start scrape goroutines. Each scrape goroutine
// reads its pod (an immutable value), writes only to the cache and to the atomic
// counters, and reports back to the loop on a channel when it ends.
type Scraper struct {
	cache *Cache
	opts  ScrapeOptions
	// client sends every scrape; ownClient reports whether the Scraper created it.
	client    *http.Client
	ownClient bool

	// succeeded and failed back Stats; written by scrape goroutines, read by anyone.
	succeeded atomic.Uint64
	failed    atomic.Uint64
}

var (
	_ manager.Runnable               = (*Scraper)(nil)
	_ manager.LeaderElectionRunnable = (*Scraper)(nil)
)

// NewScraper returns a Scraper of the pods in c. It does not scrape until Start is called.
func NewScraper(c *Cache, opts ScrapeOptions) *Scraper {
	s := &Scraper{cache: c, opts: opts.withDefaults(), client: opts.Client}
	if s.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Pods are scraped directly by IP; a proxy from the environment would not reach
		// them, or would reach them from the wrong place.
		t.Proxy = nil
		t.MaxIdleConnsPerHost = 2
		s.client = &http.Client{Transport: t}
		s.ownClient = true
	}
	return s
}

// Stats returns the scrape counters. It is safe to call at any time, concurrently with
// Start.
func (s *Scraper) Stats() ScrapeStats {
	return ScrapeStats{Succeeded: s.succeeded.Load(), Failed: s.failed.Load()}
}

// NeedLeaderElection reports false: every replica keeps its own cache up to date.
func (s *Scraper) NeedLeaderElection() bool { return false }

// inflightScrape is the loop's record of one scrape goroutine.
type inflightScrape struct {
	// target is the host:port being scraped.
	target string
	// cancel abandons the scrape; the loop calls it when the pod goes away, stops being
	// routable or moves, and again (harmlessly) when the scrape reports back.
	cancel context.CancelFunc
}

// Start scrapes every routable pod once immediately and then once per Interval, until
// ctx is done. A pod whose previous scrape is still in flight is skipped that round;
// so is every pod left over once MaxConcurrent scrapes are in flight. The scrape of a
// pod that is deleted, stops being routable or changes address or port is cancelled at
// the next round.
//
// When ctx is done, Start cancels every scrape in flight, waits for their goroutines to
// exit, closes the idle connections of its own client and returns nil. Start MUST NOT be
// called concurrently with itself on one Scraper. Failed scrapes are logged at V(1) with
// the logger from ctx.
func (s *Scraper) Start(ctx context.Context) error {
	if s.ownClient {
		defer s.client.CloseIdleConnections()
	}
	inflight := make(map[endpoint.Key]inflightScrape)
	// done receives the key of every scrape goroutine that ends. It is buffered for every
	// goroutine that can be in flight, so that none blocks on reporting.
	done := make(chan endpoint.Key, s.opts.MaxConcurrent)

	ticker := time.NewTicker(s.opts.Interval)
	defer ticker.Stop()
	s.round(ctx, inflight, done)
	for {
		select {
		case <-ctx.Done():
			for _, f := range inflight {
				f.cancel()
			}
			for len(inflight) > 0 {
				delete(inflight, <-done)
			}
			return nil
		case k := <-done:
			inflight[k].cancel() // release the scrape context's resources
			delete(inflight, k)
		case <-ticker.C:
			s.round(ctx, inflight, done)
		}
	}
}

// round is one scheduling round: it cancels the scrapes whose pods went away or moved and
// starts a scrape of every routable pod that has none in flight, as long as a slot is
// free. The number of entries in inflight is the number of slots taken, so a cancelled
// scrape holds its slot until its goroutine has reported back.
func (s *Scraper) round(ctx context.Context, inflight map[endpoint.Key]inflightScrape, done chan<- endpoint.Key) {
	routable := make(map[endpoint.Key]*Pod)
	for _, p := range s.cache.ListPods() {
		if p.IsEngine() && p.Routable() {
			routable[p.Key] = p
		}
	}
	for k, f := range inflight {
		if p, ok := routable[k]; !ok || metricsTarget(p) != f.target {
			f.cancel()
		}
	}
	// Map order varies from round to round, so when slots are scarce no pod is starved
	// for long.
	for k, p := range routable {
		if len(inflight) >= s.opts.MaxConcurrent {
			return
		}
		if _, busy := inflight[k]; busy {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		inflight[k] = inflightScrape{target: metricsTarget(p), cancel: cancel}
		go func() {
			s.scrapeAndStore(sctx, p)
			done <- k
		}()
	}
}

// metricsTarget returns the host:port serving the pod's /metrics.
func metricsTarget(p *Pod) string {
	return net.JoinHostPort(p.Address, strconv.Itoa(int(p.Port)))
}

// scrapeAndStore scrapes p, stores the snapshot and counts the outcome. A scrape
// abandoned through ctx cancellation is neither counted nor logged.
func (s *Scraper) scrapeAndStore(ctx context.Context, p *Pod) {
	m, err := s.scrape(ctx, p)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return
		}
		s.failed.Add(1)
		log.FromContext(ctx).V(1).Info("Metrics scrape failed",
			"pod", p.Key.String(), "address", metricsTarget(p), "error", err)
		return
	}
	if s.cache.SetMetrics(p, m) {
		s.succeeded.Add(1)
	}
}

// errBodyTooLarge fails a scrape whose response exceeds MaxBodyBytes.
var errBodyTooLarge = errors.New("metrics body too large")

// scrape fetches and parses the /metrics endpoint of p.
func (s *Scraper) scrape(ctx context.Context, p *Pod) (endpoint.Metrics, error) {
	url := "http://" + metricsTarget(p) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: %w", err)
	}
	// Ask for the classic text format, which ParseMetrics reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.client.Do(req)
	if err != nil {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: %w", err)
	}
	defer func() {
		// Drain a little so that the connection can be reused, then close.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: unexpected status %s", resp.Status)
	}
	body := &cappedReader{r: io.LimitReader(resp.Body, s.opts.MaxBodyBytes+1), left: s.opts.MaxBodyBytes}
	m, err := ParseMetrics(p.Engine, body, time.Now())
	if body.left < 0 {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: %w (limit %d bytes)", errBodyTooLarge, s.opts.MaxBodyBytes)
	}
	if err != nil {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: %w", err)
	}
	return m, nil
}

// cappedReader reads r, which yields at most one byte more than left, and fails with
// errBodyTooLarge once it has read more than left bytes. It lets the parser stream the
// body while refusing to parse a truncated one.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.left -= int64(n)
	if c.left < 0 {
		return n, errBodyTooLarge
	}
	return n, err
}
