package cache

import (
	"bufio"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// Defaults applied by ScrapeOptions for fields left zero.
const (
	DefaultScrapeInterval        = 100 * time.Millisecond
	DefaultScrapeTimeout         = time.Second
	DefaultScrapeMaxConcurrent   = 128
	DefaultScrapeMaxBodyBytes    = 4 << 20
	DefaultModelsRefreshInterval = time.Second
)

// phaseSlots is the number of phases within an interval that scrapes are due at (see
// ScrapeOptions.Interval).
const phaseSlots = 20

// unauthorizedBackoff is how many ModelsRefreshIntervals the Scraper waits before asking
// again an engine that refused to be listed.
const unauthorizedBackoff = 30

// maxFailureBackoff is how many intervals at most a failing engine's scrapes are delayed
// by (see scrapeTarget.backoff).
const maxFailureBackoff = 32

// ScrapeOptions configure a Scraper. The zero value is valid: every field left zero or
// negative takes its default.
type ScrapeOptions struct {
	// Interval is the time between two scrapes of one endpoint's /metrics. Each endpoint
	// is scraped at one of 20 phases spread evenly over the interval, drawn at
	// random when it becomes routable: the scrapes of a fleet come in that many batches
	// an interval, which costs less CPU per scrape than scrapes one at a time, since a
	// batch's workers find one another's answers ready instead of each sleeping for its
	// own. Defaults to DefaultScrapeInterval.
	Interval time.Duration
	// ModelsRefreshInterval is the time between two model listings (GET /v1/models) of
	// one engine, from the start of one to the start of the next; the listings are what
	// the cache trusts for the adapters an engine serves (see Cache). A listing is sent
	// right after a scrape of the same engine, on the same connection, so the effective
	// interval is rounded up to a multiple of Interval and is stretched while the
	// engine's scrapes back off. A pod is listed with its first scrape after it becomes
	// routable or moves. An engine that answers 401 or 403 is asked again only after 30
	// intervals. Defaults to DefaultModelsRefreshInterval.
	ModelsRefreshInterval time.Duration
	// Timeout bounds one request (a scrape or a listing), from dialing to the end of
	// parsing. A request that takes longer fails. Defaults to DefaultScrapeTimeout.
	Timeout time.Duration
	// MaxConcurrent bounds the number of engines with a request (scrape or listing) in
	// flight. A slot is taken again as soon as it is freed, by the engine whose scrape is
	// the most overdue, so the Scraper keeps up with MaxConcurrent divided by the mean
	// request time (latency and parsing), per second: the default sustains 1,000 engines
	// at the default interval with requests of up to 12 ms. Engines that hang hold a
	// slot each for at most Timeout, and back off. Defaults to
	// DefaultScrapeMaxConcurrent.
	MaxConcurrent int
	// MaxBodyBytes bounds the size of a /metrics response; a larger response fails the
	// scrape rather than being parsed in part. Defaults to DefaultScrapeMaxBodyBytes.
	// (/v1/models listings are read by engineclient.ReadModelCards, which reads at most
	// 4 MiB.)
	MaxBodyBytes int64
	// Dial, if set, opens the connections to the engines, as net.Dialer.DialContext
	// does; a Dial returning TLS connections scrapes over HTTPS. When nil, the Scraper
	// dials TCP. The Scraper keeps one connection per engine, which its scrapes and
	// listings take in turn, as HTTP/1.1 keep-alive requests, until the engine closes it,
	// a request on it fails or the engine is no longer scraped; Start closes them all
	// when it returns. The Scraper sends no credentials.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Wanted, if set, is called once per Interval, from one goroutine, and returns
	// whether each routable engine pod's metrics and models are of use then, with a
	// version of that answer: the same version, the same answers. The pods it rejects
	// are neither scraped nor listed, and those it stops wanting are dropped.
	Wanted func() (wanted func(*Pod) bool, version uint64)
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
// targets, their queue and the count of flights) and hands each flight (a scrape of one
// engine and, when due, a listing of its models) on a channel to one of the worker
// goroutines it starts. A worker reads its flight's pod (an immutable value), uses the
// target's connection (see engineConn), writes only to the cache and to the atomic
// counters, and reports back to the loop on a channel when the flight ends.
type Scraper struct {
	cache *Cache
	opts  ScrapeOptions
	// dial opens the connections to the engines.
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	// The counters back Stats; written by workers, read by anyone.
	succeeded, failed                                       atomic.Uint64
	listingsSucceeded, listingsFailed, listingsUnauthorized atomic.Uint64
}

var (
	_ manager.Runnable               = (*Scraper)(nil)
	_ manager.LeaderElectionRunnable = (*Scraper)(nil)
)

// NewScraper returns a Scraper of the pods in c. It does not scrape until Start is called.
func NewScraper(c *Cache, opts ScrapeOptions) *Scraper {
	s := &Scraper{cache: c, opts: opts.withDefaults(), dial: opts.Dial}
	if s.dial == nil {
		// Pods are dialed directly by IP, never through a proxy from the environment.
		var d net.Dialer
		s.dial = d.DialContext
	}
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

// scrapeTarget is the loop's record of one routable engine pod in one engine session
// (a pod that moves or stops being routable begins another session, and gets another
// target). Only the goroutine running Start reads or writes it.
type scrapeTarget struct {
	// pod is the latest version of the pod seen, in the target's session.
	pod *Pod
	// due is when the pod is to be scraped next. Successive due times are whole
	// intervals apart: they keep the phase drawn when the target was created.
	due time.Time
	// listingDue is when the next model listing is due; the zero time lists with the
	// next scrape.
	listingDue time.Time
	// backoff delays the next due time of a failing pod: one interval after a failed
	// scrape, doubled by each failed scrape after it up to maxFailureBackoff intervals,
	// and zero again after a successful one.
	backoff time.Duration
	// conn is the connection to the pod's engine; the target's flights take it in turn.
	// A target that is not gone is in the queue exactly when it has no flight.
	conn *engineConn
	// gone reports that the pod went away or its session ended; a gone target is never
	// scraped again and leaves the queue when it reaches the front.
	gone bool
	// seen is the reconciliation that last found the pod in the target's session.
	seen uint64
}

// drop marks t gone, abandons its flight, if any, and closes its connection.
func (t *scrapeTarget) drop() {
	t.gone = true
	t.conn.abort()
}

// targetQueue orders targets by due time, earliest first; it implements heap.Interface.
type targetQueue []*scrapeTarget

// Len, Less, Swap, Push and Pop implement heap.Interface.
func (q targetQueue) Len() int           { return len(q) }
func (q targetQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q targetQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *targetQueue) Push(x any)        { *q = append(*q, x.(*scrapeTarget)) }
func (q *targetQueue) Pop() any {
	old := *q
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return t
}

// flight is one turn of a target: a scrape of pod on conn, the target's connection,
// followed by a listing if list is set. Aborting conn abandons it.
type flight struct {
	target *scrapeTarget
	pod    *Pod
	conn   *engineConn
	list   bool
}

// flightResult is what a worker reports to the loop when a flight ends.
type flightResult struct {
	target *scrapeTarget
	// failed reports a failed scrape; unauthorized a listing the engine refused.
	failed, unauthorized bool
}

// schedule is the scheduling state owned by the goroutine running Start.
type schedule struct {
	// targets holds the target of every routable engine pod, by key.
	targets map[endpoint.Key]*scrapeTarget
	// queue holds the targets waiting for their next scrape, and gone targets until they
	// reach its front.
	queue targetQueue
	// flights counts the flights in progress, waiting for a worker or running, gone
	// targets' included: the slots taken.
	flights int
	// work hands each flight started to a worker; done receives the result of each
	// flight that ends. Both are buffered for every flight that can be in progress, so
	// that neither the loop nor a worker blocks on sending. Start closes work when it
	// returns.
	work chan flight
	done chan flightResult
	// workers counts the worker goroutines, and running waits for them to exit. A
	// worker is started whenever the flights in progress outnumber them, so there are
	// never more than MaxConcurrent; each keeps its stack from one flight to the next.
	workers int
	running sync.WaitGroup
	// reconciles counts the reconciliations with the cache.
	reconciles uint64
	// epoch is when Start began; phases are offsets from it, modulo the interval.
	epoch time.Time
	// synced are the versions of the cache and of the options' Wanted that the targets
	// were last reconciled with; set once reconciles > 0.
	synced struct{ cache, wanted uint64 }
}

// Start scrapes every routable engine pod once per Interval, at the phase drawn for it, and
// lists its models with its first scrape and then once per ModelsRefreshInterval, until
// ctx is done. A pod that becomes routable is scraped within two intervals. A scrape
// that is due while MaxConcurrent flights are in progress waits for a slot, the most
// overdue first; a scrape still in progress at the pod's next due time makes the pod
// skip it. A pod whose scrape fails skips its next due time, and after each further
// failure twice as many, up to 32. The requests to a pod that is deleted, stops being
// routable or changes address or port are cancelled within an interval.
//
// When ctx is done, Start abandons every request in flight, closes every connection,
// waits for its goroutines to exit and returns nil. Start MUST NOT be called
// concurrently with itself on one Scraper. Failed requests are logged at V(1) with the
// logger from ctx.
func (s *Scraper) Start(ctx context.Context) error {
	sched := &schedule{
		targets: make(map[endpoint.Key]*scrapeTarget),
		work:    make(chan flight, s.opts.MaxConcurrent),
		done:    make(chan flightResult, s.opts.MaxConcurrent),
		epoch:   time.Now(),
	}
	defer func() {
		close(sched.work)
		sched.running.Wait()
	}()
	reconcile := time.NewTicker(s.opts.Interval)
	defer reconcile.Stop()
	wake := time.NewTimer(s.opts.Interval)
	defer wake.Stop()
	s.reconcile(sched, time.Now())
	for {
		now := time.Now()
		s.dispatch(ctx, sched, now)
		if sched.flights < s.opts.MaxConcurrent && len(sched.queue) > 0 {
			wake.Reset(sched.queue[0].due.Sub(now))
		} else {
			wake.Stop() // a flight reporting back frees a slot or requeues its target
		}
		select {
		case <-ctx.Done():
			for _, t := range sched.targets {
				t.drop() // gone targets were dropped when they went
			}
			for ; sched.flights > 0; sched.flights-- {
				<-sched.done
			}
			return nil
		case r := <-sched.done:
			s.finishFlight(sched, r, time.Now())
		case now := <-reconcile.C:
			s.reconcile(sched, now)
		case <-wake.C:
		}
	}
}

// reconcile brings the targets in line with the cache, unless neither the cache nor what
// the options want changed since it last did: every routable engine pod that the
// options want, in a new session, gets a target, due at a phase drawn at random within
// the next interval and listed with its first scrape; the targets of pods that went away or whose session ended are
// dropped; the others follow the pod's latest version.
func (s *Scraper) reconcile(sched *schedule, now time.Time) {
	version := s.cache.Version() // before the pods: a change after it reconciles again
	wanted, wantedVersion := func(*Pod) bool { return true }, uint64(0)
	if s.opts.Wanted != nil {
		wanted, wantedVersion = s.opts.Wanted()
	}
	if sched.reconciles > 0 && sched.synced.cache == version && sched.synced.wanted == wantedVersion {
		return // nothing changed since the last reconcile
	}
	sched.reconciles++
	sched.synced.cache, sched.synced.wanted = version, wantedVersion
	for _, p := range s.cache.ListPods() {
		if !p.IsEngine() || !p.Routable() || !wanted(p) {
			continue
		}
		// The session changes whenever the address or port does (see Cache).
		t, ok := sched.targets[p.Key]
		if ok && t.pod.session == p.session {
			t.pod, t.seen = p, sched.reconciles
			continue
		}
		if ok {
			t.drop()
		}
		due := firstDue(sched.epoch, now, s.opts.Interval, rand.IntN(phaseSlots))
		t = &scrapeTarget{pod: p, due: due, conn: newEngineConn(metricsTarget(p)), seen: sched.reconciles}
		sched.targets[p.Key] = t
		heap.Push(&sched.queue, t)
	}
	for k, t := range sched.targets {
		if t.seen != sched.reconciles {
			t.drop()
			delete(sched.targets, k)
		}
	}
}

// dispatch starts a flight for every queued target due by now, earliest first, as long
// as a slot is free.
func (s *Scraper) dispatch(ctx context.Context, sched *schedule, now time.Time) {
	for sched.flights < s.opts.MaxConcurrent && len(sched.queue) > 0 && !sched.queue[0].due.After(now) {
		if t := heap.Pop(&sched.queue).(*scrapeTarget); !t.gone {
			s.startFlight(ctx, sched, t, now)
		}
	}
}

// startFlight starts t's flight: a scrape of its pod, followed by a listing if one is due.
func (s *Scraper) startFlight(ctx context.Context, sched *schedule, t *scrapeTarget, now time.Time) {
	// A listing due within half an interval is due now, so that listings keep to
	// ModelsRefreshInterval rather than slipping an interval.
	list := !now.Add(s.opts.Interval / 2).Before(t.listingDue)
	if list {
		t.listingDue = now.Add(s.opts.ModelsRefreshInterval)
	}
	if sched.flights++; sched.flights > sched.workers {
		sched.workers++
		w := &scrapeWorker{s: s, ctx: ctx, br: bufio.NewReaderSize(nil, answerBufferSize)}
		sched.running.Go(func() { w.work(sched) })
	}
	sched.work <- flight{target: t, pod: t.pod, conn: t.conn, list: list}
}

// work runs the flights it receives, reporting each, until the channel is closed.
func (w *scrapeWorker) work(sched *schedule) {
	for f := range sched.work {
		failed, abandoned := w.scrapeAndStore(f.conn, f.pod)
		r := flightResult{target: f.target, failed: failed}
		if f.list && !abandoned {
			r.unauthorized = w.listAndStore(f.conn, f.pod)
		}
		sched.done <- r
	}
}

// finishFlight records the end of the flight r reports and, unless its target is gone, queues
// the target for its next due time.
func (s *Scraper) finishFlight(sched *schedule, r flightResult, now time.Time) {
	sched.flights--
	t := r.target
	if t.gone {
		return
	}
	if r.unauthorized {
		t.listingDue = now.Add(unauthorizedBackoff * s.opts.ModelsRefreshInterval)
	}
	switch {
	case !r.failed:
		t.backoff = 0
	case t.backoff == 0:
		t.backoff = s.opts.Interval
	default:
		t.backoff = min(2*t.backoff, maxFailureBackoff*s.opts.Interval)
	}
	t.due = nextDue(t.due, now.Add(t.backoff), s.opts.Interval)
	heap.Push(&sched.queue, t)
}

// firstDue returns the earliest time not before now at the phase given (0 to
// phaseSlots-1): a whole number of intervals plus phase phaseSlots-ths of one after epoch.
func firstDue(epoch, now time.Time, interval time.Duration, phase int) time.Time {
	offset := time.Duration(phase) * (interval / phaseSlots)
	due := epoch.Add(now.Sub(epoch)/interval*interval + offset)
	if due.Before(now) {
		due = due.Add(interval)
	}
	return due
}

// nextDue returns the earliest time later than after (which is not before due) that is a
// whole number of intervals after due.
func nextDue(due, after time.Time, interval time.Duration) time.Time {
	return due.Add((after.Sub(due)/interval + 1) * interval)
}

// metricsTarget returns the host:port serving the pod's /metrics and /v1/models.
func metricsTarget(p *Pod) string {
	return net.JoinHostPort(p.Address, strconv.Itoa(int(p.Port)))
}

// scrapeAndStore scrapes p on ec within Timeout, stores the snapshot, with the engine
// profile learnt from the previous snapshot to this one and the requests this process
// has in flight to p, and counts the outcome. It reports whether the scrape failed, and
// whether it was abandoned because ec was aborted, which is neither a failure nor
// counted nor logged.
func (w *scrapeWorker) scrapeAndStore(ec *engineConn, p *Pod) (failed, abandoned bool) {
	m, err := w.scrape(ec, p)
	if err != nil {
		if ec.isAborted() {
			return false, true
		}
		w.s.failed.Add(1)
		log.FromContext(w.ctx).V(1).Info("Metrics scrape failed",
			"pod", p.Key.String(), "address", ec.address, "error", err)
		return true, false
	}
	m.LocalInFlight = p.Load().InFlight()
	var learnt endpoint.Profile
	prev := p.Metrics()
	if prev != nil {
		learnt = prev.Profile
	}
	if learnt.Slots == 0 { // the declared slots, until the engine is seen queueing
		learnt.Slots = float64(p.Slots)
	}
	m.Profile = learnt.Next(prev, &m)
	if w.s.cache.SetMetrics(p, m) {
		w.s.succeeded.Add(1)
	}
	return false, false
}

// listAndStore lists the models of p on ec within Timeout, stores the listing and counts
// the outcome; it reports whether the engine refused to be listed. A listing abandoned
// because ec was aborted is neither counted nor logged.
func (w *scrapeWorker) listAndStore(ec *engineConn, p *Pod) (unauthorized bool) {
	requestedAt := time.Now()
	models, err := w.listModels(ec)
	switch {
	case err != nil && ec.isAborted():
		return false
	case errors.Is(err, errUnauthorized):
		w.s.listingsUnauthorized.Add(1)
		log.FromContext(w.ctx).V(1).Info("Engine refused model listing; ModelAdapter placement decides its adapters",
			"pod", p.Key.String(), "address", ec.address, "error", err)
		w.s.cache.ForgetModelListing(p)
		return true
	case err != nil:
		w.s.listingsFailed.Add(1)
		log.FromContext(w.ctx).V(1).Info("Model listing failed; keeping the last one",
			"pod", p.Key.String(), "address", ec.address, "error", err)
		return false
	}
	if w.s.cache.SetModelListing(p, requestedAt, models) {
		w.s.listingsSucceeded.Add(1)
	}
	return false
}

// errBodyTooLarge fails a request whose response exceeds MaxBodyBytes.
var errBodyTooLarge = errors.New("body too large")

// scrape fetches and parses the /metrics endpoint of p on ec.
func (w *scrapeWorker) scrape(ec *engineConn, p *Pod) (endpoint.Metrics, error) {
	resp, err := w.exchange(ec, ec.metricsRequest)
	if err != nil {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: %w", err)
	}
	defer w.release(ec, resp)
	if resp.StatusCode != http.StatusOK {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: unexpected status %s", resp.Status)
	}
	limit := w.s.opts.MaxBodyBytes
	if resp.ContentLength > limit {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: %w (%d bytes, limit %d)", errBodyTooLarge, resp.ContentLength, limit)
	}
	body := &w.body
	*body = cappedReader{r: resp.Body, left: limit}
	m, err := ParseMetrics(p.Engine, body, time.Now())
	body.r = nil
	if body.left < 0 {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: %w (limit %d bytes)", errBodyTooLarge, limit)
	}
	if err != nil {
		return endpoint.Metrics{}, fmt.Errorf("scrape metrics: %w", err)
	}
	return m, nil
}

// cappedReader reads r, and fails with errBodyTooLarge once it has read more than left
// bytes, which it finds by reading at most one byte more. It lets the parser stream the
// body while refusing to parse a truncated one.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(b []byte) (int, error) {
	if c.left < 0 {
		return 0, errBodyTooLarge
	}
	if int64(len(b)) > c.left+1 {
		b = b[:c.left+1]
	}
	n, err := c.r.Read(b)
	c.left -= int64(n)
	if c.left < 0 {
		return n, errBodyTooLarge
	}
	return n, err
}
