package gateway

import (
	"context"
	"errors"
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
	"github.com/switchboard-llm/switchboard/internal/gateway/routetable"
	"github.com/switchboard-llm/switchboard/internal/openai"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/strategies"
)

// Headers the gateway reads or writes (DESIGN §5, §2).
const (
	// HeaderEndpoint names the endpoint that served the request, "namespace/pod".
	HeaderEndpoint = "x-switchboard-endpoint"
	// HeaderRequestID carries the request id; a client's own value is kept.
	HeaderRequestID = "x-request-id"
	// HeaderStrategy asks for a strategy, honoured only where the policy allows it.
	HeaderStrategy = "x-routing-strategy"
)

// Options configure a Gateway.
type Options struct {
	// DefaultStrategy routes rules without a RoutingPolicy filter. Default least-request.
	DefaultStrategy v1alpha1.Strategy
	// MaxBodyBytes bounds request bodies (413 beyond). Default 16 MiB.
	MaxBodyBytes int64
	// UpstreamTimeout bounds the wait for the engine's response headers (504 beyond).
	// Default 5 minutes.
	UpstreamTimeout time.Duration
	// DialTimeout bounds connecting to an engine; a failed connection is retried on
	// another endpoint. Default 2 seconds.
	DialTimeout time.Duration
	// Limits bound the requests in flight per endpoint and queued per model.
	Limits strategies.Limits
	// Random breaks routing ties; nil means routing.DefaultRandom.
	Random routing.Random
}

// withDefaults returns o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.DefaultStrategy == "" {
		o.DefaultStrategy = v1alpha1.StrategyLeastRequest
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	if o.UpstreamTimeout <= 0 {
		o.UpstreamTimeout = 5 * time.Minute
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	return o
}

// Gateway serves the requests of Switchboard's Gateways. Create it with New; it is safe
// for concurrent use.
//
// Synchronisation model: the request path reads the cache view (lock-free snapshots),
// the compiled route table (an atomic.Pointer, rebuilt by whichever request first sees
// the Gateway API stores change, under buildMu) and the routers (a sync.Map keyed by
// policy generation and strategy, built once per key).
type Gateway struct {
	view      *cache.Gateway
	opts      Options
	registry  *strategies.Registry
	transport *http.Transport

	metrics *metrics
	log     logr.Logger

	table   atomic.Pointer[compiledTable]
	buildMu sync.Mutex
	routers sync.Map // routerKey -> routing.Router
}

// New returns a Gateway reading view.
func New(view *cache.Gateway, opts Options) *Gateway {
	opts = opts.withDefaults()
	dialer := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
	g := &Gateway{
		view:    view,
		opts:    opts,
		metrics: newMetrics(view),
		log:     ctrl.Log.WithName("gateway"),

		transport: &http.Transport{
			DialContext:           dialer.DialContext,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: opts.UpstreamTimeout,
			DisableCompression:    true,
		},
	}
	g.registry = strategies.NewRegistry(strategies.Deps{
		Reserver:           view.Tracker,
		Queuer:             view.Tracker,
		Pods:               view.Reader,
		StaleAfter:         view.StaleAfter(),
		Random:             opts.Random,
		ObservePrefixMatch: g.metrics.prefix.Observe,
	})
	return g
}

// Close releases the gateway's idle upstream connections.
func (g *Gateway) Close() { g.transport.CloseIdleConnections() }

// compiledTable is a route table with the store versions it was built from.
type compiledTable struct {
	classes, gateways, routes uint64
	*routetable.Table
}

// Table returns the route table compiled from the current Gateway API objects,
// rebuilding it if they changed since it was last built.
func (g *Gateway) Table() *routetable.Table {
	v := g.view
	cur := g.table.Load()
	if cur != nil && cur.classes == v.GatewayClasses.Version() && cur.gateways == v.Gateways.Version() &&
		cur.routes == v.Routes.Version() {
		return cur.Table
	}
	g.buildMu.Lock()
	defer g.buildMu.Unlock()
	// Read versions before the objects, so that a change made meanwhile forces the next
	// request to rebuild again rather than being missed.
	next := &compiledTable{classes: v.GatewayClasses.Version(), gateways: v.Gateways.Version(), routes: v.Routes.Version()}
	if cur = g.table.Load(); cur != nil && *cur == (compiledTable{next.classes, next.gateways, next.routes, cur.Table}) {
		return cur.Table
	}
	next.Table = routetable.Build(routetable.Input{
		Classes:  v.GatewayClasses.List(),
		Gateways: v.Gateways.List(),
		Routes:   v.Routes.List(),
	})
	g.table.Store(next)
	return next.Table
}

// routerKey identifies a built router: the policy (zero for the default strategy), its
// generation and the strategy in force.
type routerKey struct {
	policy     types.NamespacedName
	generation int64
	strategy   v1alpha1.Strategy
}

// router returns the router for policy (nil: the default strategy), honouring the
// requested strategy override where the policy allows it.
func (g *Gateway) router(policy *v1alpha1.RoutingPolicy, requested string) (routing.Router, v1alpha1.Strategy, error) {
	spec := &v1alpha1.RoutingPolicySpec{Strategy: g.opts.DefaultStrategy}
	var key routerKey
	if policy != nil {
		spec = &policy.Spec
		key.policy = types.NamespacedName{Namespace: policy.Namespace, Name: policy.Name}
		key.generation = policy.Generation
	}
	key.strategy = spec.Strategy
	if requested != "" && policy != nil && policy.Spec.AllowStrategyOverride != nil && *policy.Spec.AllowStrategyOverride {
		key.strategy = v1alpha1.Strategy(requested)
	}
	if r, ok := g.routers.Load(key); ok {
		return r.(routing.Router), key.strategy, nil
	}
	r, err := g.registry.Router(spec, key.strategy, g.opts.Limits)
	if err != nil {
		return nil, key.strategy, err
	}
	actual, _ := g.routers.LoadOrStore(key, r)
	// Forget the routers of the policy's older generations.
	g.routers.Range(func(k, _ any) bool {
		if old := k.(routerKey); old.policy == key.policy && old.generation != key.generation {
			g.routers.Delete(k)
		}
		return true
	})
	return actual.(routing.Router), key.strategy, nil
}

// decision is a routed request: what was asked and where it goes.
type decision struct {
	req    openai.Request
	model  *cache.Model
	target *routing.Target
}

// decide parses body, finds the candidates of the model among backends (all endpoints
// of the model when backends is nil), and routes the request with the policy's router,
// excluding the endpoints in exclude. It blocks while the request is queued. Once the
// body has parsed, the returned decision carries the request even when err is not nil.
func (g *Gateway) decide(ctx context.Context, headers http.Header, body []byte, backends []routetable.Backend,
	policy *v1alpha1.RoutingPolicy, exclude map[*cache.Pod]bool) (*decision, error) {
	req, err := openai.ParseRequest(body)
	if err != nil {
		var reqErr *openai.RequestError
		if errors.As(err, &reqErr) {
			return nil, errBadRequest(reqErr.Message)
		}
		return nil, errBadRequest(err.Error())
	}
	d := &decision{req: req}
	model, ok := g.view.Model(req.Model)
	if !ok {
		return d, errModelNotFound(req.Model)
	}
	d.model = model
	candidates := g.candidates(model, backends, exclude)
	if len(candidates) == 0 {
		return d, errNoEndpoint(req.Model)
	}
	router, strategy, err := g.router(policy, headers.Get(HeaderStrategy))
	if err != nil {
		if policy == nil {
			return d, errInternal(fmt.Sprintf("default strategy %q: %v", strategy, err))
		}
		return d, errInvalidFilter(fmt.Sprintf("RoutingPolicy %s/%s: %v", policy.Namespace, policy.Name, err))
	}
	rc := routing.NewRoutingContext(ctx, routing.Request{
		Model:        req.Model,
		Prompt:       req.Prompt,
		PromptTokens: openai.EstimateTokens(req.Prompt),
		MaxTokens:    req.MaxTokens,
		Stream:       req.Stream,
		RequestID:    headers.Get(HeaderRequestID),
		Headers:      headers,
	}, model, candidates)
	start := time.Now()
	router.Route(rc)
	target, err := rc.Wait()
	g.metrics.routing.WithLabelValues(string(strategy)).Observe(since(start))
	if err != nil {
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
		return d, routingError(req.Model, err)
	}
	d.target = target
	return d, nil
}

// candidates returns the routable endpoints of model selected by one of the backends'
// Services (every endpoint of the model when backends is nil), minus those in exclude.
func (g *Gateway) candidates(model *cache.Model, backends []routetable.Backend, exclude map[*cache.Pod]bool) []*cache.Pod {
	eps := model.Endpoints()
	var services []cache.Service
	if backends != nil {
		for _, b := range backends {
			if svc, ok := g.view.Services.Get(b.Service); ok {
				services = append(services, svc)
			}
		}
	}
	out := eps[:0]
	for _, p := range eps {
		if exclude[p] || (backends != nil && !selectedByAny(services, p)) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// selectedByAny reports whether one of services selects p.
func selectedByAny(services []cache.Service, p *cache.Pod) bool {
	for _, s := range services {
		if s.Selects(p) {
			return true
		}
	}
	return false
}
