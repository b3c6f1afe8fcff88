package gateway

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/extproc"
	"github.com/switchboard-llm/switchboard/internal/openai"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// PickScope is the explicit set of engine pods the Envoy ext_proc endpoint picker may
// choose from: those of one namespace whose labels match a selector, or those of one
// InferencePool. The picker serves no HTTPRoute, so without a scope it would choose among
// every engine of the cluster.
type PickScope struct {
	// Namespace is the namespace of the pods; required without Pool.
	Namespace string
	// Selector selects the pods by label; nil or empty selects every engine pod of the
	// namespace.
	Selector labels.Selector
	// Pool, if set, is the InferencePool whose pods, on its target port, the picker
	// chooses from, with the pool's RoutingPolicy (routetable.PoolPolicyAnnotation),
	// as they are when each request arrives; Namespace and Selector are then unused.
	Pool *types.NamespacedName
}

// contains reports whether p is in the scope.
func (s PickScope) contains(p *cache.Pod) bool {
	return p.Key.Namespace == s.Namespace && (s.Selector == nil || s.Selector.Matches(labels.Set(p.Labels)))
}

// MaxFallbacks is how many fallback endpoints the picker lists after its pick, for the
// data plane to try in order when the primary cannot be reached.
const MaxFallbacks = 2

// Picker is the endpoint picker that Envoy's ext_proc filter asks: it chooses and
// reserves, with the gateway's default strategy, a ready engine pod in its scope that
// serves the request's model, and lists up to MaxFallbacks other such pods, least loaded
// first.
type Picker struct {
	g     *Gateway
	scope PickScope
}

var _ extproc.Picker = (*Picker)(nil)

// Picker returns the endpoint picker of scope.
func (g *Gateway) Picker(scope PickScope) *Picker { return &Picker{g: g, scope: scope} }

// Pick chooses and reserves an endpoint for an OpenAI-compatible request body among the
// pods of the scope, and of req.Subset if set. A model that no pod in the scope serves is
// answered 404; one whose pods in the scope are all outside the subset, busy or excluded,
// 503; a request shed because every pod is at its cap and the queue is full, 429. Errors
// carry their HTTP status (Error.HTTPStatus).
//
// The reservation is on the primary. When the data plane reports that a fallback served,
// it moves there: the primary's is released and the fallback counts the request until
// the response ends, even beyond its cap, since the request is already there.
func (p *Picker) Pick(ctx context.Context, req extproc.Request) (extproc.Pick, error) {
	g := p.g
	path, _, _ := strings.Cut(req.Headers.Get(":path"), "?") // Envoy's pseudo-header
	r, err := parseRequest(path, req.Headers.Get("Content-Type"), req.Body)
	if err != nil {
		return extproc.Pick{}, err
	}
	model, ok := g.view.Model(r.Model)
	if !ok {
		return extproc.Pick{}, errModelNotFound(r.Model)
	}
	scope, policy, err := p.resolve()
	if err != nil {
		return extproc.Pick{}, err
	}
	cands := model.PodSet().Filter(scope.contains)
	if cands.Len() == 0 {
		return extproc.Pick{}, errModelNotFound(r.Model)
	}
	if req.Subset != nil {
		cands = cands.Filter(func(pod *cache.Pod) bool { return req.Allows(podEndpoint(pod)) })
		if cands.Len() == 0 {
			return extproc.Pick{}, errNoEndpoint(r.Model)
		}
	}
	router, strategy, err := g.router(policy, "")
	if err != nil {
		return extproc.Pick{}, errInternal("routing strategy: " + err.Error())
	}
	target, err := g.route(ctx, req.Headers, r, model, router, strategy, cands)
	if err != nil {
		return extproc.Pick{}, err
	}
	res := &pickReservation{
		tracker: g.view.Tracker, admission: g.admission, model: model, tokensIn: openai.EstimateTokens(r.Prompt),
		primary: target, fallbacks: fallbacks(cands, target.Pod),
	}
	return extproc.Pick{Endpoints: res.endpoints(), Reservation: res}, nil
}

// resolve returns the scope of this request and the RoutingPolicy that routes it (nil:
// the gateway's default strategy): for a pool, its current pods on its target port and
// its policy.
func (p *Picker) resolve() (scope poolScope, policy *v1alpha1.RoutingPolicy, err error) {
	if p.scope.Pool == nil {
		return poolScope{PickScope: p.scope}, nil, nil
	}
	pool, ok := p.g.view.Pools.Get(*p.scope.Pool)
	if !ok {
		return poolScope{}, nil, &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "no_ready_endpoint",
			Message: fmt.Sprintf("InferencePool %s does not exist.", p.scope.Pool)}
	}
	policy, ok = p.g.view.Policies.Get(pool.Policy)
	if !ok {
		return poolScope{}, nil, errInvalidBackend(fmt.Sprintf("RoutingPolicy %s of InferencePool %s does not exist.", pool.Policy, pool.Key))
	}
	return poolScope{PickScope: PickScope{Namespace: pool.Key.Namespace, Selector: labels.SelectorFromSet(pool.Selector)}, port: pool.Port}, policy, nil
}

// poolScope is a PickScope as resolved for one request: with port, only the pods that
// serve on it.
type poolScope struct {
	PickScope
	port int32
}

func (s poolScope) contains(p *cache.Pod) bool {
	return s.PickScope.contains(p) && (s.port == 0 || p.Port == s.port)
}

// fallbacks returns up to MaxFallbacks pods of cands other than primary, fewest requests
// in flight first.
func fallbacks(cands cache.PodSet, primary *cache.Pod) []*cache.Pod {
	others := make([]*cache.Pod, 0, cands.Len())
	for _, pod := range cands.Pods {
		if pod != primary {
			others = append(others, pod)
		}
	}
	slices.SortStableFunc(others, func(a, b *cache.Pod) int { return cmp.Compare(a.Load().InFlight(), b.Load().InFlight()) })
	return others[:min(len(others), MaxFallbacks)]
}

// podEndpoint is pod's "ip:port", as the Endpoint Picker Protocol names endpoints.
func podEndpoint(pod *cache.Pod) string {
	return net.JoinHostPort(pod.Address, strconv.Itoa(int(pod.Port)))
}

// pickReservation is the load of one picked request: on the primary until the data plane
// reports that a fallback served, then on that fallback. The ext_proc Server calls its
// methods from one goroutine, never concurrently.
type pickReservation struct {
	tracker cache.Tracker
	// admission is told when the reservation moved to a fallback ends.
	admission *routing.Admission
	model     *cache.Model
	tokensIn  int64
	primary   *routing.Target
	fallbacks []*cache.Pod
	// moved is the reservation on the fallback that served, if one did.
	moved *cache.Reservation
}

// endpoints lists the primary, then the fallbacks.
func (r *pickReservation) endpoints() []string {
	eps := []string{podEndpoint(r.primary.Pod)}
	for _, pod := range r.fallbacks {
		eps = append(eps, podEndpoint(pod))
	}
	return eps
}

// Served moves the reservation to the fallback at endpoint, if one is there. What the
// routing algorithm learnt from its choice (such as a prefix-cache index entry) stays
// with the primary.
func (r *pickReservation) Served(endpoint string) {
	if r.moved != nil {
		return
	}
	for _, pod := range r.fallbacks {
		if podEndpoint(pod) == endpoint {
			r.primary.Release(0)
			r.moved = r.tracker.Reserve(r.model, pod, r.tokensIn)
			return
		}
	}
}

// Release ends the reservation, wherever it is.
func (r *pickReservation) Release() {
	r.primary.Release(0)
	if r.moved != nil {
		r.moved.Release(0)
		r.admission.Released(r.moved.Pod())
	}
}
