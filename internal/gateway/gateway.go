package gateway

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/gateway/inbound"
	"github.com/switchboard-llm/switchboard/internal/outlier"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
	"github.com/switchboard-llm/switchboard/internal/routing/strategies"
)

// Headers the gateway reads or writes (DESIGN §5, §2). Header names are
// case-insensitive; these are in Go's canonical form, which http.Header looks up without
// converting, and so without allocating, on every request.
const (
	// HeaderEndpoint names the endpoint that served the request, "namespace/pod", or for
	// an InferencePool rank on another port than the pod's engine port "namespace/pod:port".
	HeaderEndpoint = "X-Switchboard-Endpoint"
	// HeaderRequestID carries the request id; a client's own value is kept.
	HeaderRequestID = "X-Request-Id"
	// HeaderStrategy asks for a strategy, honoured only where the policy allows it.
	HeaderStrategy = "X-Routing-Strategy"
)

// Options configure a Gateway.
type Options struct {
	// DefaultStrategy is the strategy of the ext_proc endpoint picker (Pick), which
	// serves no route. Default least-request.
	DefaultStrategy v1alpha1.Strategy
	// Inbound bounds what clients may send: header and body sizes and read timeouts
	// (inbound.Limits defaults).
	Inbound inbound.Limits
	// UpstreamTimeout bounds the wait for the engine's response headers (504 beyond).
	// Default 5 minutes.
	UpstreamTimeout time.Duration
	// UpstreamIdleTimeout bounds the wait for the next bytes of a response body once its
	// headers are relayed: an engine that stalls longer is cut off, and the request's
	// reservation released, rather than held for as long as the client waits. Default
	// UpstreamTimeout.
	UpstreamIdleTimeout time.Duration
	// DialTimeout bounds connecting to an engine; a failed connection is retried on
	// another endpoint. Default 2 seconds.
	DialTimeout time.Duration
	// Limits bound the requests in flight per endpoint, queued per model and how long
	// they wait.
	Limits strategies.Limits
	// PrefixIndexMemoryBytes bounds the memory of every prefix-cache router's index
	// together, whatever the policies' maxBlocksPerEndpoint; beyond it the least recently
	// learnt blocks are forgotten. Default prefixcache.DefaultMemoryBytes (256 MiB).
	PrefixIndexMemoryBytes int64
	// Random breaks routing ties and draws weighted backends; nil means
	// routing.DefaultRandom.
	Random routing.Random
}

// withDefaults returns o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.DefaultStrategy == "" {
		o.DefaultStrategy = v1alpha1.StrategyLeastRequest
	}
	o.Inbound = o.Inbound.WithDefaults()
	if o.UpstreamTimeout <= 0 {
		o.UpstreamTimeout = 5 * time.Minute
	}
	if o.UpstreamIdleTimeout <= 0 {
		o.UpstreamIdleTimeout = o.UpstreamTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.Random == nil {
		o.Random = routing.DefaultRandom
	}
	if o.PrefixIndexMemoryBytes <= 0 {
		o.PrefixIndexMemoryBytes = prefixcache.DefaultMemoryBytes
	}
	return o
}

// Gateway serves the requests of Switchboard's Gateways. Create it with New; it is safe
// for concurrent use.
//
// Synchronisation model: the request path reads the cache view (lock-free snapshots),
// the compiled route table (an atomic.Pointer, rebuilt by whichever request first sees
// the stores it is built from change, under buildMu), the routers (a sync.Map keyed by
// policy UID, generation and strategy, built once per key) and the outlier detector (atomics
// per pod).
type Gateway struct {
	view      *cache.Gateway
	opts      Options
	registry  *strategies.Registry
	transport *http.Transport
	// upstream sends HTTP/1.1 requests whose body is in memory (every inference
	// request) or absent, without http.Transport's goroutine hand-offs.
	upstream *upstreamClient
	// h2c speaks HTTP/2 with prior knowledge, to Service ports of appProtocol
	// kubernetes.io/h2c.
	h2c *http.Transport
	// plain balances plain Gateway API rules by least request, without a queue.
	plain routing.Router
	// admission is where the requests of every router wait for capacity.
	admission *routing.Admission
	// mirrors bounds the mirrored requests in flight; a mirror beyond it is dropped.
	mirrors chan struct{}
	// created is the created field of the model objects the gateway lists: the cache
	// does not record when a model appeared.
	created int64

	// outliers is the passive health of the endpoints, per pod, shared by every route.
	outliers *outlier.Detector

	metrics *metrics
	log     logr.Logger

	table   atomic.Pointer[compiledTable]
	buildMu sync.Mutex
	// candidateSets are the backends' candidate sets for the current pods and Services.
	candidateSets atomic.Pointer[candidateSets]
	routers       sync.Map // routerKey -> *builtRouter
}

// maxMirrorsInFlight bounds the RequestMirror copies in flight at once.
const maxMirrorsInFlight = 256

// New returns a Gateway reading view.
func New(view *cache.Gateway, opts Options) *Gateway {
	opts = opts.withDefaults()
	dialer := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
	g := &Gateway{
		view:    view,
		opts:    opts,
		metrics: newMetrics(view),
		log:     ctrl.Log.WithName("gateway"),
		mirrors: make(chan struct{}, maxMirrorsInFlight),
		created: time.Now().Unix(),

		transport: upstreamTransport(dialer, opts.UpstreamTimeout, false),
		upstream: &upstreamClient{dialer: dialer, headerTimeout: opts.UpstreamTimeout, idleTimeout: upstreamIdleConnTimeout,
			maxIdle: upstreamMaxIdleConns, maxIdlePerHost: upstreamMaxIdleConnsPerHost},
		h2c: upstreamTransport(dialer, opts.UpstreamTimeout, true),
	}
	g.outliers = outlier.New(nil, outlierEvents{g})
	g.metrics.ejected = g.outliers.EjectedCount
	g.admission = routing.NewAdmission(view.Tracker)
	g.registry = strategies.NewRegistry(strategies.Deps{
		Reserver:           view.Tracker,
		Admission:          g.admission,
		Pods:               view.Reader,
		StaleAfter:         view.StaleAfter(),
		Random:             opts.Random,
		ObservePrefixMatch: g.metrics.prefix.Observe,
		ObservePrefixTrim:  func(blocks int) { g.metrics.prefixTrimmed.Add(float64(blocks)) },
		PrefixBudget:       prefixcache.NewBudget(opts.PrefixIndexMemoryBytes),
	})
	leastRequest, err := g.registry.Picker(v1alpha1.StrategyLeastRequest, &v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest})
	if err != nil {
		panic(fmt.Sprintf("least-request picker: %v", err)) // built in; cannot fail
	}
	g.plain = routing.NewRouter(leastRequest, routing.Options{Reserver: view.Tracker, StaleAfter: view.StaleAfter(), Admission: g.admission})
	return g
}

// outlierEvents logs the outlier detector's ejections and returns and counts ejections.
type outlierEvents struct{ g *Gateway }

func (e outlierEvents) Ejected(ep endpoint.Key, address string, d time.Duration, ejections int) {
	e.g.metrics.ejections.WithLabelValues(ep.Namespace).Inc()
	e.g.log.Info("Endpoint ejected after consecutive failures", "endpoint", ep.String(), "address", address,
		"duration", d, "ejections", ejections)
}

func (e outlierEvents) Returned(ep endpoint.Key, address string) {
	e.g.log.Info("Ejected endpoint returns", "endpoint", ep.String(), "address", address)
}

// EndpointEjected reports whether the gateway's outlier detection has ejected ep (at its
// current address) now.
func (g *Gateway) EndpointEjected(ep *endpoint.Endpoint) bool { return g.outliers.Ejected(ep) }

// Close releases the gateway's idle upstream connections.
func (g *Gateway) Close() {
	g.transport.CloseIdleConnections()
	g.upstream.CloseIdleConnections()
	g.h2c.CloseIdleConnections()
}

// appProtocolH2C is the Service port appProtocol of backends that speak HTTP/2 in
// clear text (Gateway API, GEP-1911).
const appProtocolH2C = "kubernetes.io/h2c"

// Bounds of the idle connections to engines and backends, of each client.
const (
	upstreamMaxIdleConns        = 1024
	upstreamMaxIdleConnsPerHost = 256
	upstreamIdleConnTimeout     = 90 * time.Second
)

// upstreamTransport returns the transport to engines and backends: HTTP/1.1, or with
// h2c HTTP/2 over clear text with prior knowledge.
func upstreamTransport(dialer *net.Dialer, responseHeaderTimeout time.Duration, h2c bool) *http.Transport {
	t := &http.Transport{
		DialContext:           dialer.DialContext,
		MaxIdleConns:          upstreamMaxIdleConns,
		MaxIdleConnsPerHost:   upstreamMaxIdleConnsPerHost,
		IdleConnTimeout:       upstreamIdleConnTimeout,
		ResponseHeaderTimeout: responseHeaderTimeout,
		DisableCompression:    true,
	}
	if h2c {
		t.Protocols = new(http.Protocols)
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	return t
}

// transportFor returns the transport to port of svc, by the port's appProtocol.
func (g *Gateway) transportFor(svc cache.Service, port int32) *http.Transport {
	if svc.AppProtocol(port) == appProtocolH2C {
		return g.h2c
	}
	return g.transport
}

// compiledTable is a route table with the versions of the stores it was built from.
type compiledTable struct {
	versions tableVersions
	*routetable.Table
}

// tableVersions are the versions of every store a route table is built from.
type tableVersions struct {
	classes, gateways, routes, grants, namespaces, services, pools, policies, certificates uint64
}

func (g *Gateway) tableVersions() tableVersions {
	v := g.view
	return tableVersions{
		classes: v.GatewayClasses.Version(), gateways: v.Gateways.Version(), routes: v.Routes.Version(),
		grants: v.ReferenceGrants.Version(), namespaces: v.Namespaces.Version(),
		services: v.Services.Version(), pools: v.Pools.Version(), policies: v.Policies.Version(),
		certificates: v.Certificates.Version(),
	}
}

// Table returns the route table compiled from the current Gateway API objects, Services,
// InferencePools, RoutingPolicies and listeners' certificates, rebuilding it if they changed since it
// was last built.
func (g *Gateway) Table() *routetable.Table {
	cur := g.table.Load()
	if cur != nil && cur.versions == g.tableVersions() {
		return cur.Table
	}
	g.buildMu.Lock()
	defer g.buildMu.Unlock()
	// Read versions before the objects, so that a change made meanwhile forces the next
	// request to rebuild again rather than being missed.
	versions := g.tableVersions()
	if cur = g.table.Load(); cur != nil && cur.versions == versions {
		return cur.Table
	}
	v := g.view
	next := &compiledTable{versions: versions, Table: routetable.Build(routetable.Input{
		Classes:         v.GatewayClasses.List(),
		Gateways:        v.Gateways.List(),
		Routes:          v.Routes.List(),
		ReferenceGrants: v.ReferenceGrants.List(),
		NamespaceLabels: func(ns string) map[string]string {
			labels, _ := v.Namespaces.Get(types.NamespacedName{Name: ns})
			return labels
		},
		ServiceExists: func(key types.NamespacedName) bool {
			_, ok := v.Services.Get(key)
			return ok
		},
		Pool: v.Pools.Get,
		Policy: func(key types.NamespacedName) (bool, error) {
			p, ok := v.Policies.Get(key)
			if !ok {
				return false, nil
			}
			// The router requests will use: built once here, reused by them.
			_, _, err := g.router(p, "")
			return true, err
		},
		Certificate: v.Certificates.Get,
	})}
	g.table.Store(next)
	g.pruneRouters(v.Policies.List())
	return next.Table
}

// routerKey identifies a built router: the policy (zero for the default strategy), its
// generation and the strategy in force. The UID tells a policy from one deleted and
// created again under its name, which starts again at generation 1.
type routerKey struct {
	uid        types.UID
	generation int64
	strategy   v1alpha1.Strategy
}

// builtRouter is a router with the settings it was built from (routerSettings).
type builtRouter struct {
	routing.Router
	settings string
	// readsPrompt caches routing.ReadsPrompt of the router.
	readsPrompt bool
}

// ReadsPrompt reports whether the router reads the prompt's text.
func (b *builtRouter) ReadsPrompt() bool { return b.readsPrompt }

// router returns the router for policy (nil: the default strategy), honouring the
// requested strategy override where the policy allows it; a requested strategy that does
// not exist is errUnknownStrategy. A policy's new generation whose routing settings
// (routerSettings) are those of the last keeps its router, and with it what the router
// learnt; a new generation that changes them gets a new router, and the routers of older
// generations are forgotten. A request that still reads an older generation than one
// already routed uses a router of its settings without keeping it: it neither evicts
// the newer generation's router nor leaves one of its own behind. The routers of deleted
// policies are forgotten when the route table is rebuilt (pruneRouters).
func (g *Gateway) router(policy *v1alpha1.RoutingPolicy, requested string) (routing.Router, v1alpha1.Strategy, error) {
	key := routerKey{strategy: g.opts.DefaultStrategy}
	if policy != nil {
		key = routerKey{uid: policy.UID, generation: policy.Generation, strategy: policy.Spec.Strategy}
	}
	if requested != "" && policy != nil && policy.Spec.AllowStrategyOverride != nil && *policy.Spec.AllowStrategyOverride {
		if !g.registry.Knows(v1alpha1.Strategy(requested)) {
			return nil, "", errUnknownStrategy(requested)
		}
		key.strategy = v1alpha1.Strategy(requested)
	}
	if r, ok := g.routers.Load(key); ok {
		return r.(*builtRouter), key.strategy, nil
	}
	return g.buildRouter(policy, key)
}

// buildRouter returns the router of key for policy (nil: the default strategy), which
// router did not find: one of an earlier generation with the same settings, or a new
// one, kept unless policy is older than a generation already routed.
func (g *Gateway) buildRouter(policy *v1alpha1.RoutingPolicy, key routerKey) (routing.Router, v1alpha1.Strategy, error) {
	spec := &v1alpha1.RoutingPolicySpec{Strategy: g.opts.DefaultStrategy}
	if policy != nil {
		spec = &policy.Spec
	}
	settings := routerSettings(spec)
	var reuse *builtRouter
	newest := key.generation
	g.routers.Range(func(k, v any) bool {
		if other := k.(routerKey); other.uid == key.uid {
			newest = max(newest, other.generation)
			if b := v.(*builtRouter); other.strategy == key.strategy && b.settings == settings {
				reuse = b
			}
		}
		return true
	})
	if reuse == nil {
		r, err := g.registry.Router(spec, key.strategy, g.opts.Limits)
		if err != nil {
			return nil, key.strategy, err
		}
		reuse = &builtRouter{Router: r, settings: settings, readsPrompt: routing.ReadsPrompt(r)}
	}
	if key.generation < newest {
		return reuse, key.strategy, nil
	}
	actual, _ := g.routers.LoadOrStore(key, reuse)
	g.routers.Range(func(k, _ any) bool {
		if old := k.(routerKey); old.uid == key.uid && old.generation < key.generation {
			g.routers.Delete(k)
		}
		return true
	})
	return actual.(*builtRouter), key.strategy, nil
}

// routerSettings returns what of spec its router is built from, as text: two specs with
// the same settings build the same router.
func routerSettings(spec *v1alpha1.RoutingPolicySpec) string {
	b, err := json.Marshal(struct {
		Fallback        *v1alpha1.Strategy              `json:"fallback,omitempty"`
		PrefixCache     *v1alpha1.PrefixCacheConfig     `json:"prefixCache,omitempty"`
		SessionAffinity *v1alpha1.SessionAffinityConfig `json:"sessionAffinity,omitempty"`
		Scorers         []v1alpha1.Scorer               `json:"scorers,omitempty"`
		Queue           *v1alpha1.QueueConfig           `json:"queue,omitempty"`
	}{spec.Fallback, spec.PrefixCache, spec.SessionAffinity, spec.Scorers, spec.Queue})
	if err != nil { // the API types always encode
		panic(err)
	}
	return string(b)
}

// pruneRouters forgets the routers of policies that are not among live (by UID); the
// default strategy's router stays.
func (g *Gateway) pruneRouters(live []*v1alpha1.RoutingPolicy) {
	uids := make(map[types.UID]bool, len(live))
	for _, p := range live {
		uids[p.UID] = true
	}
	g.routers.Range(func(k, _ any) bool {
		if uid := k.(routerKey).uid; uid != "" && !uids[uid] {
			g.routers.Delete(k)
		}
		return true
	})
}
