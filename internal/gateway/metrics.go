package gateway

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// metrics are the gateway's Prometheus collectors.
type metrics struct {
	requests *requestCounter
	routing  *prometheus.HistogramVec
	overhead prometheus.Histogram
	prefix   prometheus.Histogram
	// prefixTrimmed counts prefix-index blocks forgotten because an engine reported
	// fewer cached tokens than expected.
	prefixTrimmed prometheus.Counter
	// bindFailures counts listener addresses that could not be bound.
	bindFailures prometheus.Counter
	load         loadCollector
	// ejections counts outlier ejections by the endpoint's namespace.
	ejections *prometheus.CounterVec
	// retries counts requests tried again on another endpoint.
	retries prometheus.Counter
	// ejected returns the number of endpoints ejected now; set by New.
	ejected func() int
}

func newMetrics(view *cache.Gateway) *metrics {
	return &metrics{
		requests: &requestCounter{view: view, CounterVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_gateway_requests_total",
			Help: "Requests answered, by route, model, endpoint and HTTP status code; the series of an endpoint that left go with it.",
		}, []string{"route", "model", "endpoint", "code"})},
		routing: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_gateway_routing_duration_seconds",
			Help:    "Time to select and reserve an endpoint, queueing included, by strategy.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}, []string{"strategy"}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchboard_gateway_overhead_seconds",
			Help:    "Time from receiving a request to sending it upstream: matching, body read, parsing and routing.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}),
		prefix: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchboard_gateway_prefix_cache_match_ratio",
			Help:    "Fraction of a prompt's blocks the chosen endpoint already held, for prefix-cache routing.",
			Buckets: prometheus.LinearBuckets(0, 0.1, 11),
		}),
		prefixTrimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_gateway_prefix_index_trimmed_blocks_total",
			Help: "Prefix-index blocks forgotten because an engine's usage reported fewer cached prompt tokens than the index expected it to hold.",
		}),
		bindFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_gateway_listener_bind_failures_total",
			Help: "Attempts to listen on a Gateway's address and port that failed; each is retried.",
		}),
		load: loadCollector{view: view},
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_gateway_ejections_total",
			Help: "Endpoints ejected by outlier detection after consecutive failures, by the endpoint's namespace.",
		}, []string{"namespace"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_gateway_retries_total",
			Help: "Inference requests tried again on another endpoint after a connection failure, a 5xx answer or an engine that no longer serves the model.",
		}),
	}
}

// Register registers the gateway's metrics with r.
func (g *Gateway) Register(r prometheus.Registerer) error {
	ejected := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchboard_gateway_ejected_endpoints",
		Help: "Endpoints currently ejected by outlier detection.",
	}, func() float64 { return float64(g.metrics.ejected()) })
	for _, c := range []prometheus.Collector{g.metrics.requests, g.metrics.routing, g.metrics.overhead, g.metrics.prefix,
		g.metrics.prefixTrimmed, g.metrics.bindFailures, g.metrics.load, g.metrics.ejections, g.metrics.retries, ejected} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// observe records one answered request.
func (m *metrics) observe(o *outcome) {
	m.requests.observe(o)
}

// requestCounter counts answered requests by route, model, endpoint and status, and
// drops the series of endpoints that left the cache when it is collected, so that pod
// churn does not grow the series without bound.
type requestCounter struct {
	*prometheus.CounterVec
	view *cache.Gateway
	// endpoints holds the endpoint of every series that names one (endpoint.Key ->
	// its label).
	endpoints sync.Map
}

// observe counts o. The series is counted before its endpoint is recorded, so that a
// Collect racing it leaves no series unrecorded: it at worst records an endpoint whose
// series it dropped, which the next Collect forgets.
func (c *requestCounter) observe(o *outcome) {
	label := o.endpointLabel()
	c.WithLabelValues(o.route, o.model, label, statusLabel(o.status)).Inc()
	if label == "" {
		return
	}
	if _, ok := c.endpoints.Load(o.pod.Key); !ok {
		c.endpoints.Store(o.pod.Key, label)
	}
}

// Collect drops the series of the recorded endpoints no longer in the cache, then
// collects the rest.
func (c *requestCounter) Collect(ch chan<- prometheus.Metric) {
	c.endpoints.Range(func(k, label any) bool {
		if _, ok := c.view.Pod(k.(endpoint.Key)); !ok {
			c.endpoints.Delete(k)
			c.DeletePartialMatch(prometheus.Labels{"endpoint": label.(string)})
		}
		return true
	})
	c.CounterVec.Collect(ch)
}

// statusLabels are the texts of the status codes 0 to 599, so that counting a request
// does not format its status.
var statusLabels = func() (labels [600]string) {
	for code := range labels {
		labels[code] = strconv.Itoa(code)
	}
	return labels
}()

// statusLabel returns code as text.
func statusLabel(code int) string {
	if code >= 0 && code < len(statusLabels) {
		return statusLabels[code]
	}
	return strconv.Itoa(code)
}

// loadCollector reports the cache's request counters at scrape time.
type loadCollector struct{ view *cache.Gateway }

var (
	inFlightDesc = prometheus.NewDesc("switchboard_gateway_in_flight",
		"Requests reserved on endpoints of a model and not yet released.", []string{"model"}, nil)
	queuedDesc = prometheus.NewDesc("switchboard_gateway_queued",
		"Requests waiting in the gateway's queue for a model.", []string{"model"}, nil)
	endpointInFlightDesc = prometheus.NewDesc("switchboard_gateway_endpoint_in_flight",
		"Requests reserved on an endpoint and not yet released.", []string{"endpoint"}, nil)
	endpointMetricsAgeDesc = prometheus.NewDesc("switchboard_gateway_endpoint_metrics_age_seconds",
		"Time since the metrics the gateway holds of an endpoint were scraped; absent before the first scrape.", []string{"endpoint"}, nil)
)

// Describe sends the descriptors of the collected metrics.
func (c loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inFlightDesc
	ch <- queuedDesc
	ch <- endpointInFlightDesc
	ch <- endpointMetricsAgeDesc
}

// Collect reads the current counters of every served model and known endpoint, and the
// age of every scraped endpoint's metrics.
func (c loadCollector) Collect(ch chan<- prometheus.Metric) {
	for _, name := range c.view.Models() {
		m, ok := c.view.Model(name)
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(m.Load().InFlight()), name)
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(m.Load().Waiting()), name)
	}
	for _, p := range c.view.ListPods() {
		key := p.ID()
		ch <- prometheus.MustNewConstMetric(endpointInFlightDesc, prometheus.GaugeValue, float64(p.Load().InFlight()), key)
		if m := p.Metrics(); m != nil {
			ch <- prometheus.MustNewConstMetric(endpointMetricsAgeDesc, prometheus.GaugeValue, since(m.ScrapedAt), key)
		}
	}
}

// since returns the seconds elapsed since t.
func since(t time.Time) float64 { return time.Since(t).Seconds() }
