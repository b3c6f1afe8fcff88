package cache

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// Options configure a cache context.
type Options struct {
	// Scrape configures the engine scraper of the metadata and gateway contexts: metrics
	// every Scrape.Interval, model listings every Scrape.ModelsRefreshInterval.
	Scrape ScrapeOptions
	// StaleAfter is the age beyond which a metrics snapshot is stale and routers treat an
	// endpoint's metrics as unknown. Zero means ten scrape intervals.
	StaleAfter time.Duration
	// BackendsOnly makes the gateway's scraper scrape and list only the engine pods that
	// a Service some HTTPRoute names as a backend selects: the only pods its routes can
	// send requests to. Leave it false when something else routes to engine pods too,
	// such as the ext_proc picker. The other contexts ignore it.
	BackendsOnly bool
}

// withDefaults returns o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	o.Scrape = o.Scrape.withDefaults()
	if o.StaleAfter <= 0 {
		o.StaleAfter = 10 * o.Scrape.Interval
	}
	return o
}

// kindFeed is a feed of any kind, as wired by the init helpers.
type kindFeed interface {
	register(mgr ctrl.Manager, role string) error
	prime(ctx context.Context) error
}

// Sync reports whether a cache context holds the state of the API server as first listed
// by its informers; after that, watch events keep it current.
type Sync struct {
	synced <-chan struct{}
}

// Synced reports whether the initial listing has been applied.
func (s Sync) Synced() bool {
	select {
	case <-s.synced:
		return true
	default:
		return false
	}
}

// WaitForSync blocks until the initial listing has been applied or ctx ends.
func (s Sync) WaitForSync(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for metadata cache sync: %w", ctx.Err())
	}
}

// ReadyCheck is a readiness probe (a controller-runtime healthz.Checker) that fails until
// the initial listing has been applied.
func (s Sync) ReadyCheck(*http.Request) error {
	if !s.Synced() {
		return errors.New("metadata cache not synced")
	}
	return nil
}

// AddProbes registers the process's health probes on mgr: /healthz passes once the
// manager runs, /readyz once the initial listing has been applied.
func (s Sync) AddProbes(mgr ctrl.Manager) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add healthz check: %w", err)
	}
	if err := mgr.AddReadyzCheck("cache", s.ReadyCheck); err != nil {
		return fmt.Errorf("add readyz check: %w", err)
	}
	return nil
}

// Manager is the controller manager's view of the cache: pods, models and adapters. The
// manager scrapes no metrics, so Pod.Metrics is always nil, and tracks no requests.
type Manager struct {
	Reader
	Sync
}

// Metadata is the metadata service's view of the cache: pods, models, adapters and their
// engine metrics. It tracks no requests.
type Metadata struct {
	Reader
	Sync
	scraper    *Scraper
	staleAfter time.Duration
}

// StaleAfter returns the age beyond which a metrics snapshot is stale.
func (m *Metadata) StaleAfter() time.Duration { return m.staleAfter }

// ScrapeStats returns the scraper's counters, of scrapes and of model listings.
func (m *Metadata) ScrapeStats() ScrapeStats { return m.scraper.Stats() }

// Gateway is the gateway's view of the cache: everything the request path reads (pods,
// models, adapters, metrics, routing policies, Services, HTTPRoutes, Gateways,
// GatewayClasses and the certificates of the Secrets their listeners name) and the
// Tracker that counts its requests. Stored API objects are shared and MUST NOT be modified.
type Gateway struct {
	Reader
	Sync
	Tracker

	// Policies are the RoutingPolicies.
	Policies *Store[*v1alpha1.RoutingPolicy]
	// Services are the Services, reduced to their selectors and ports, and the
	// InferencePools as the Services that select their pods (routetable.PoolService).
	Services *Store[Service]
	// Pools are the InferencePools.
	Pools *Store[routetable.Pool]
	// ReferenceGrants are the ReferenceGrants.
	ReferenceGrants *Store[*gatewayv1.ReferenceGrant]
	// Namespaces are the labels of each Namespace, keyed by {Name: namespace}.
	Namespaces *Store[map[string]string]
	// Routes are the HTTPRoutes.
	Routes *Store[*gatewayv1.HTTPRoute]
	// Gateways are the Gateways.
	Gateways *Store[*gatewayv1.Gateway]
	// GatewayClasses are the GatewayClasses.
	GatewayClasses *Store[*gatewayv1.GatewayClass]
	// Certificates are what the Secrets named by listeners of Switchboard's Gateways hold
	// for TLS, keyed by Secret; no other Secret is kept.
	Certificates *Store[routetable.Certificate]

	scraper    *Scraper
	staleAfter time.Duration
	backends   backendSelections
}

// StaleAfter returns the age beyond which a metrics snapshot is stale.
func (g *Gateway) StaleAfter() time.Duration { return g.staleAfter }

// ScrapeStats returns the scraper's counters, of scrapes and of model listings.
func (g *Gateway) ScrapeStats() ScrapeStats { return g.scraper.Stats() }

// InitForManager builds the controller manager's cache context on mgr: Pod and
// ModelAdapter feeds, no scraper, so ModelAdapter placement alone decides which adapters
// a pod serves. The scheme of mgr must know core, Switchboard and Gateway API types. The
// context starts with mgr.
func InitForManager(mgr ctrl.Manager) (*Manager, error) {
	c := New()
	sync, err := wire(mgr, "manager", []kindFeed{podFeed(c), adapterFeed(c)})
	if err != nil {
		return nil, err
	}
	return &Manager{Reader: c.Reader, Sync: sync}, nil
}

// InitForMetadata builds the metadata service's cache context on mgr: Pod and
// ModelAdapter feeds and the scraper of engine metrics and model listings. The context
// starts with mgr.
func InitForMetadata(mgr ctrl.Manager, opts Options) (*Metadata, error) {
	opts = opts.withDefaults()
	c := New()
	scraper := NewScraper(c, opts.Scrape)
	sync, err := wire(mgr, "metadata", []kindFeed{podFeed(c), adapterFeed(c)}, scraper)
	if err != nil {
		return nil, err
	}
	return &Metadata{Reader: c.Reader, Sync: sync, scraper: scraper, staleAfter: opts.StaleAfter}, nil
}

// InitForGateway builds the gateway's cache context on mgr: Pod (every Pod, for plain
// Gateway API backends, not only engine Pods), ModelAdapter, RoutingPolicy, Service,
// InferencePool (when the API server has its CRD), HTTPRoute, Gateway, GatewayClass, ReferenceGrant and Namespace feeds, a feed of the
// certificates of the Secrets Switchboard's Gateways name (Secrets are watched
// metadata-only; a named Secret's data is read with mgr's uncached API reader), and the
// scraper of engine metrics and model listings (of engine Pods only; with
// opts.BackendsOnly, of those HTTPRoutes' backends select). The context starts with mgr.
func InitForGateway(mgr ctrl.Manager, opts Options) (*Gateway, error) {
	opts = opts.withDefaults()
	c := New()
	g := &Gateway{
		Reader:          c.Reader,
		Policies:        new(Store[*v1alpha1.RoutingPolicy]),
		Services:        new(Store[Service]),
		Pools:           new(Store[routetable.Pool]),
		Routes:          new(Store[*gatewayv1.HTTPRoute]),
		Gateways:        new(Store[*gatewayv1.Gateway]),
		GatewayClasses:  new(Store[*gatewayv1.GatewayClass]),
		ReferenceGrants: new(Store[*gatewayv1.ReferenceGrant]),
		Namespaces:      new(Store[map[string]string]),
		Certificates:    new(Store[routetable.Certificate]),
		staleAfter:      opts.StaleAfter,
	}
	if opts.BackendsOnly {
		opts.Scrape.Wanted = func() (func(*Pod) bool, uint64) {
			sel := g.backends.load(g)
			return sel.selects, sel.seq
		}
	}
	g.scraper = NewScraper(c, opts.Scrape)
	feeds := []kindFeed{
		backendPodFeed(c), adapterFeed(c), policyFeed(g.Policies),
		serviceFeed(g.Services), routeFeed(g.Routes), gatewayFeed(g.Gateways),
		gatewayClassFeed(g.GatewayClasses), referenceGrantFeed(g.ReferenceGrants),
		namespaceFeed(g.Namespaces), newCertificateFeed(g.Certificates),
	}
	if KnowsKind(mgr, schema.GroupKind{Group: inferencev1.GroupName, Kind: routetable.PoolKind}) {
		feeds = append(feeds, poolFeed(c, g.Pools, g.Services))
	}
	var err error
	if g.Sync, err = wire(mgr, "gateway", feeds, g.scraper); err != nil {
		return nil, err
	}
	return g, nil
}

// wire registers the feeds' controllers, the initial sync and the given runnables with
// mgr, naming the controllers after role.
func wire(mgr ctrl.Manager, role string, feeds []kindFeed, runnables ...manager.Runnable) (Sync, error) {
	synced := make(chan struct{})
	for _, f := range feeds {
		if err := f.register(mgr, role); err != nil {
			return Sync{}, err
		}
	}
	runnables = append(runnables, &initialSync{feeds: feeds, synced: synced})
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return Sync{}, fmt.Errorf("add %s cache runnable: %w", role, err)
		}
	}
	return Sync{synced: synced}, nil
}
