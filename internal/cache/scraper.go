package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/engineclient"
)

// Defaults applied by ScrapeOptions for fields left zero.
const (
	DefaultScrapeInterval        = 100 * time.Millisecond
	DefaultScrapeTimeout         = time.Second
	DefaultScrapeMaxConcurrent   = 32
	DefaultScrapeMaxBodyBytes    = 4 << 20
	DefaultModelsRefreshInterval = time.Second
)

// unauthorizedBackoff is how many ModelsRefreshIntervals the Scraper waits before asking
// again an engine that refused to be listed.
const unauthorizedBackoff = 30

// ScrapeOptions configure a Scraper. The zero value is valid: every field left zero or
// negative takes its default.
type ScrapeOptions struct {
	// Interval is the time between two scrapes of one endpoint's /metrics, measured from
	// the start of one scheduling round to the next. Defaults to DefaultScrapeInterval.
	Interval time.Duration
	// ModelsRefreshInterval is the time between two model listings (GET /v1/models) of
	// one engine, from the start of one to the start of the next; the listings are what
	// the cache trusts for the adapters an engine serves (see Cache). Listings are
	// scheduled by the scraping rounds, so the effective interval is rounded up to a
	// multiple of Interval. A pod is listed in the first round after it becomes routable
	// or moves. An engine that answers 401 or 403 is asked again only after
	// 30 intervals. Defaults to DefaultModelsRefreshInterval.
	ModelsRefreshInterval time.Duration
	// Timeout bounds one request (a scrape or a listing), from dialing to the end of
	// parsing. A request that takes longer fails and frees its concurrency slot.
	// Defaults to DefaultScrapeTimeout.
	Timeout time.Duration
	// MaxConcurrent bounds the number of requests (scrapes and listings) in flight across
	// all endpoints. When every slot is taken, the remaining requests are skipped until a
	// later round. Defaults to DefaultScrapeMaxConcurrent.
	MaxConcurrent int
	// MaxBodyBytes bounds the size of a /metrics response; a larger response fails the
	// scrape rather than being parsed in part. Defaults to DefaultScrapeMaxBodyBytes.
	// (/v1/models listings go through engineclient, which reads at most 4 MiB.)
	MaxBodyBytes int64
	// Client, if set, sends the requests; it SHOULD NOT have a Timeout of its own shorter
	// than Timeout. The Scraper never closes a caller's client's connections. When nil,
	// the Scraper uses a client of its own whose idle connections are closed when Start
	// returns. The Scraper sends no credentials.
	Client *http.Client
}

// withDefaults returns o with every zero or negative field replaced by its default.
func (o ScrapeOptions) withDefaults() ScrapeOptions {
	if o.Interval <= 0 {
		o.Interval = DefaultScrapeInterval
	}
	if o.ModelsRefreshInterval <= 0 {
		o.ModelsRefreshInterval = DefaultModelsRefreshInterval
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

// ScrapeStats counts completed requests since the Scraper was created. Requests the
// Scraper abandons itself, because their pod went away or moved or the Scraper stopped,
// are not counted.
type ScrapeStats struct {
	// Succeeded counts scrapes whose snapshot was stored in the cache. A snapshot the
	// cache discards, because its pod changed address or went away meanwhile, is not
	// counted.
	Succeeded uint64
	// Failed counts scrapes that failed: the endpoint could not be reached, timed out,
	// answered with a status other than 200 or with a body that is too large or does not
	// parse.
	Failed uint64
	// ListingsSucceeded counts model listings recorded in the cache; like Succeeded, it
	// does not count listings the cache discards.
	ListingsSucceeded uint64
	// ListingsFailed counts model listings that failed as Failed describes for scrapes,
	// except those counted by ListingsUnauthorized.
	ListingsFailed uint64
	// ListingsUnauthorized counts model listings the engine refused with 401 or 403.
	ListingsUnauthorized uint64
}

// Scraper periodically scrapes the /metrics endpoint of every routable engine pod in a
// Cache and stores the parsed snapshots with Cache.SetMetrics, and lists the models of
// each (GET /v1/models) every ModelsRefreshInterval and stores them with
// Cache.SetModelListing. A failed scrape leaves the previous snapshot in place, so that
// it ages into staleness (see endpoint.Metrics.Stale); a failed listing leaves the
// previous listing in place; a refused one (401, 403) is forgotten with
// Cache.ForgetModelListing. Create it with NewScraper and run it with Start, typically by
// adding it to a controller-runtime manager; it runs on every replica, not only on the
// leader.
//
// Synchronisation model: the goroutine running Start owns all scheduling state (the
// in-flight map and the listing schedule) and is the only one to start request
// goroutines. Each request goroutine reads its pod (an immutable value), writes only to
// the cache and to the atomic counters, and reports back to the loop on a channel when
// it ends.
type Scraper struct {
	cache *Cache
	opts  ScrapeOptions
	// client sends every request; ownClient reports whether the Scraper created it.
	client    *http.Client
	ownClient bool
	// engines lists the engines' models through client.
	engines *engineclient.Client

	// The counters back Stats; written by request goroutines, read by anyone.
	succeeded, failed                                       atomic.Uint64
	listingsSucceeded, listingsFailed, listingsUnauthorized atomic.Uint64
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
	s.engines = engineclient.New(s.client)
	return s
}

// Stats returns the request counters. It is safe to call at any time, concurrently with
// Start.
func (s *Scraper) Stats() ScrapeStats {
	return ScrapeStats{
		Succeeded:            s.succeeded.Load(),
		Failed:               s.failed.Load(),
		ListingsSucceeded:    s.listingsSucceeded.Load(),
		ListingsFailed:       s.listingsFailed.Load(),
		ListingsUnauthorized: s.listingsUnauthorized.Load(),
	}
}

// NeedLeaderElection reports false: every replica keeps its own cache up to date.
func (s *Scraper) NeedLeaderElection() bool { return false }

// probe is one kind of periodic request the Scraper sends to each routable engine pod.
type probe uint8

const (
	// probeMetrics scrapes /metrics, every round.
	probeMetrics probe = iota
	// probeModels lists /v1/models, every ModelsRefreshInterval.
	probeModels
)

// probes lists every probe, in the order a round starts them for one pod.
var probes = [...]probe{probeMetrics, probeModels}

// flight identifies one request: the pod asked and what it is asked.
type flight struct {
	pod   endpoint.Key
	probe probe
}

// inflightScrape is the loop's record of one request goroutine.
type inflightScrape struct {
	// target and session identify the pod version asked: its host:port and engine
	// session.
	target  string
	session uint64
	// cancel abandons the request; the loop calls it when the pod goes away, stops being
	// routable or moves, and again (harmlessly) when the request reports back.
	cancel context.CancelFunc
}

// flightResult is what a request goroutine reports to the loop when it ends.
type flightResult struct {
	flight
	session uint64
	// unauthorized reports a listing the engine refused.
	unauthorized bool
}

// listingDue is the loop's schedule of one pod's listings.
type listingDue struct {
	// session is the engine session scheduled; a new session is listed at once.
	session uint64
	// at is when the next listing is due.
	at time.Time
}

// schedule is the scheduling state owned by the goroutine running Start.
type schedule struct {
	inflight map[flight]inflightScrape
	listings map[endpoint.Key]listingDue
	// done receives the result of every request goroutine that ends. It is buffered for
	// every goroutine that can be in flight, so that none blocks on reporting.
	done chan flightResult
	// rounds counts the rounds; odd rounds start listings before scrapes, so that when
	// slots are scarce neither kind of request starves the other.
	rounds uint64
}

// Start scrapes every routable engine pod once immediately and then once per Interval,
// and lists its models immediately and then once per ModelsRefreshInterval, until ctx is
// done. A request whose previous instance for the same pod is still in flight is skipped
// that round; so is every request left over once MaxConcurrent are in flight. The
// requests to a pod that is deleted, stops being routable or changes address or port are
// cancelled at the next round.
//
// When ctx is done, Start cancels every request in flight, waits for their goroutines to
// exit, closes the idle connections of its own client and returns nil. Start MUST NOT be
// called concurrently with itself on one Scraper. Failed requests are logged at V(1)
// with the logger from ctx.
func (s *Scraper) Start(ctx context.Context) error {
	if s.ownClient {
		defer s.client.CloseIdleConnections()
	}
	sched := &schedule{
		inflight: make(map[flight]inflightScrape),
		listings: make(map[endpoint.Key]listingDue),
		done:     make(chan flightResult, s.opts.MaxConcurrent),
	}

	ticker := time.NewTicker(s.opts.Interval)
	defer ticker.Stop()
	s.round(ctx, sched, time.Now())
	for {
		select {
		case <-ctx.Done():
			for _, f := range sched.inflight {
				f.cancel()
			}
			for len(sched.inflight) > 0 {
				delete(sched.inflight, (<-sched.done).flight)
			}
			return nil
		case r := <-sched.done:
			sched.inflight[r.flight].cancel() // release the request context's resources
			delete(sched.inflight, r.flight)
			if d, ok := sched.listings[r.pod]; r.unauthorized && ok && d.session == r.session {
				d.at = time.Now().Add(unauthorizedBackoff * s.opts.ModelsRefreshInterval)
				sched.listings[r.pod] = d
			}
		case now := <-ticker.C:
			s.round(ctx, sched, now)
		}
	}
}

// round is one scheduling round: it cancels the requests whose pods went away or moved
// and starts, for every routable engine pod, each due request that has none in flight,
// as long as a slot is free. The number of entries in inflight is the number of slots
// taken, so a cancelled request holds its slot until its goroutine has reported back.
func (s *Scraper) round(ctx context.Context, sched *schedule, now time.Time) {
	routable := make(map[endpoint.Key]*Pod)
	for _, p := range s.cache.ListPods() {
		if p.IsEngine() && p.Routable() {
			routable[p.Key] = p
		}
	}
	for f, fl := range sched.inflight {
		if p, ok := routable[f.pod]; !ok || metricsTarget(p) != fl.target || p.session != fl.session {
			fl.cancel()
		}
	}
	for k := range sched.listings {
		if _, ok := routable[k]; !ok {
			delete(sched.listings, k)
		}
	}
	// Ticks may come a little early; a listing due within half an interval is due now,
	// so that listings keep to ModelsRefreshInterval rather than slipping a round.
	dueBy := now.Add(s.opts.Interval / 2)
	// Map order varies from round to round, so when slots are scarce no pod is starved
	// for long.
	order := probes
	if sched.rounds++; sched.rounds%2 == 0 {
		slices.Reverse(order[:])
	}
	for k, p := range routable {
		for _, pr := range order {
			if len(sched.inflight) >= s.opts.MaxConcurrent {
				return
			}
			f := flight{pod: k, probe: pr}
			if _, busy := sched.inflight[f]; busy {
				continue
			}
			if pr == probeModels {
				if d, ok := sched.listings[k]; ok && d.session == p.session && dueBy.Before(d.at) {
					continue
				}
				sched.listings[k] = listingDue{session: p.session, at: now.Add(s.opts.ModelsRefreshInterval)}
			}
			rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
			sched.inflight[f] = inflightScrape{target: metricsTarget(p), session: p.session, cancel: cancel}
			go func() {
				r := flightResult{flight: f, session: p.session}
				switch pr {
				case probeMetrics:
					s.scrapeAndStore(rctx, p)
				case probeModels:
					r.unauthorized = s.listAndStore(rctx, p)
				}
				sched.done <- r
			}()
		}
	}
}

// metricsTarget returns the host:port serving the pod's /metrics and /v1/models.
func metricsTarget(p *Pod) string {
	return net.JoinHostPort(p.Address, strconv.Itoa(int(p.Port)))
}

// scrapeAndStore scrapes p, stores the snapshot, with the engine profile learnt from
// the previous snapshot to this one and the requests this process has in flight to p,
// and counts the outcome. A scrape abandoned through ctx cancellation is neither counted
// nor logged.
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
	m.LocalInFlight = p.Load().InFlight()
	var learnt endpoint.Profile
	prev := p.Metrics()
	if prev != nil {
		learnt = prev.Profile
	}
	m.Profile = learnt.Next(prev, &m)
	if s.cache.SetMetrics(p, m) {
		s.succeeded.Add(1)
	}
}

// listAndStore lists the models of p, stores the listing and counts the outcome; it
// reports whether the engine refused to be listed. A listing abandoned through ctx
// cancellation is neither counted nor logged.
func (s *Scraper) listAndStore(ctx context.Context, p *Pod) (unauthorized bool) {
	requestedAt := time.Now()
	models, err := s.listModels(ctx, p)
	switch {
	case err != nil && errors.Is(ctx.Err(), context.Canceled):
		return false
	case errors.Is(err, errUnauthorized):
		s.listingsUnauthorized.Add(1)
		log.FromContext(ctx).V(1).Info("Engine refused model listing; ModelAdapter placement decides its adapters",
			"pod", p.Key.String(), "address", metricsTarget(p), "error", err)
		s.cache.ForgetModelListing(p)
		return true
	case err != nil:
		s.listingsFailed.Add(1)
		log.FromContext(ctx).V(1).Info("Model listing failed; keeping the last one",
			"pod", p.Key.String(), "address", metricsTarget(p), "error", err)
		return false
	}
	if s.cache.SetModelListing(p, requestedAt, models) {
		s.listingsSucceeded.Add(1)
	}
	return false
}

// errBodyTooLarge fails a request whose response exceeds MaxBodyBytes.
var errBodyTooLarge = errors.New("body too large")

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
