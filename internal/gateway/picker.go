package gateway

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/extproc"
	"github.com/switchboard-llm/switchboard/internal/openai"
	"github.com/switchboard-llm/switchboard/internal/routetable"
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
	// as they are when each request arrives; Selector is then unused.
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
	cands, port, policy, err := p.candidates(model)
	if err != nil {
		return extproc.Pick{}, err
	}
	if cands.Len() == 0 {
		return extproc.Pick{}, errModelNotFound(r.Model)
	}
	if req.Subset != nil {
		cands = cands.Filter(func(pod *cache.Pod) bool { return req.Allows(podEndpoint(pod, port)) })
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
		port: port, primary: target, fallbacks: fallbacks(cands, target.Pod),
	}
	return extproc.Pick{Endpoints: res.endpoints(), Reservation: res}, nil
}

// candidates returns the pods of the scope that serve model, the port they are picked on
// (0: each pod's own) and the RoutingPolicy that routes them (nil: the gateway's default
// strategy). A pool's are its backend's candidate set, as a route to the pool has them
// (computed once per version of the pods and pools), on the pool's target port, with the
// pool's policy.
func (p *Picker) candidates(model *cache.Model) (cache.PodSet, int32, *v1alpha1.RoutingPolicy, error) {
	if p.scope.Pool == nil {
		return model.PodSet().Filter(p.scope.contains), 0, nil, nil
	}
	pool, ok := p.g.view.Pools.Get(*p.scope.Pool)
	if !ok {
		return cache.PodSet{}, 0, nil, errUnavailable(fmt.Sprintf("InferencePool %s does not exist.", p.scope.Pool))
	}
	policy, ok := p.g.view.Policies.Get(pool.Policy)
	if !ok {
		return cache.PodSet{}, 0, nil, errInvalidBackend(fmt.Sprintf("RoutingPolicy %s of InferencePool %s does not exist.", pool.Policy, pool.Key))
	}
	_, cands := p.g.candidates(routetable.Backend{Service: routetable.PoolService(pool.Key), Port: pool.Port, Pool: &pool}, model, nil)
	return cands, pool.Port, policy, nil
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

// podEndpoint is pod's "ip:port" on port (0: the pod's own), as the Endpoint Picker
// Protocol names endpoints.
func podEndpoint(pod *cache.Pod, port int32) string {
	if port == 0 {
		port = pod.Port
	}
	return net.JoinHostPort(pod.Address, strconv.Itoa(int(port)))
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
	// port is the port the pods are picked on (0: each pod's own).
	port      int32
	primary   *routing.Target
	fallbacks []*cache.Pod
	// moved is the reservation on the fallback that served, if one did.
	moved *cache.Reservation
}

// endpoints lists the primary, then the fallbacks.
func (r *pickReservation) endpoints() []string {
	eps := []string{podEndpoint(r.primary.Pod, r.port)}
	for _, pod := range r.fallbacks {
		eps = append(eps, podEndpoint(pod, r.port))
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
		if podEndpoint(pod, r.port) == endpoint {
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
