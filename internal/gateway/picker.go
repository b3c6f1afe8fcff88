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
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// PickScope is the explicit set of endpoints the Envoy ext_proc endpoint picker may
// choose from: the engine pods of one namespace whose labels match a selector, or the
// endpoints of one InferencePool, every targetPort of every pod it selects (each a rank,
// see cache.Cache). The picker serves no HTTPRoute, so without a scope it would choose
// among every engine of the cluster.
type PickScope struct {
	// Namespace is the namespace of the pods; required without Pool.
	Namespace string
	// Selector selects the pods by label; nil or empty selects every engine pod of the
	// namespace.
	Selector labels.Selector
	// Pool, if set, is the InferencePool whose endpoints the picker chooses from, with
	// the pool's RoutingPolicy (routetable.PoolPolicyAnnotation), as they are when each
	// request arrives; Selector is then unused.
	Pool *types.NamespacedName
}

// contains reports whether p is in the namespace and selector scope: a pod's own
// endpoint, as only pools select ranks.
func (s PickScope) contains(p *cache.Pod) bool {
	return p.Key.Namespace == s.Namespace && !p.Key.IsRank() && (s.Selector == nil || s.Selector.Matches(labels.Set(p.Labels)))
}

// MaxFallbacks is how many fallback endpoints the picker lists after its pick, for the
// data plane to try in order when the primary cannot be reached.
const MaxFallbacks = 2

// Picker is the endpoint picker that Envoy's ext_proc filter asks: it chooses and
// reserves, with the gateway's default strategy or the pool's policy, a ready endpoint in
// its scope that serves the request's model, and lists up to MaxFallbacks other such
// endpoints (other ranks of the same pod among them), least loaded first. Endpoints are
// named "ip:port", each rank on its own port.
type Picker struct {
	g     *Gateway
	scope PickScope
}

var _ extproc.Picker = (*Picker)(nil)

// Picker returns the endpoint picker of scope.
func (g *Gateway) Picker(scope PickScope) *Picker { return &Picker{g: g, scope: scope} }

// Pick chooses and reserves an endpoint for an OpenAI-compatible request body among the
// endpoints of the scope, and of req.Subset if set (which names endpoints, so a rank is
// in it by its own "ip:port"). A model that no endpoint in the scope serves is answered
// 404; one whose endpoints in the scope are all outside the subset, busy or excluded,
// 503; a request shed because every endpoint is at its cap and the queue is full, 429.
// Errors carry their HTTP status (Error.HTTPStatus).
//
// The reservation is on the primary. When the data plane reports that a fallback served,
// it moves there: the primary's is released and the fallback counts the request until
// the response ends, even beyond its cap, since the request is already there; and the
// routing algorithm learns the fallback as the request's endpoint (routing.Target.Served).
func (p *Picker) Pick(ctx context.Context, req extproc.Request) (extproc.Pick, error) {
	g := p.g
	// The scope's policy, and with it the router, does not depend on the body, so the
	// prompt's text is built only if the router reads it. Their errors are answered after
	// the body's and the model's, as those are the request's own.
	pool, policy, scopeErr := p.policy()
	var (
		router    routing.Router
		strategy  v1alpha1.Strategy
		routerErr error
	)
	if scopeErr == nil {
		router, strategy, routerErr = g.router(policy, "")
	}
	path, _, _ := strings.Cut(req.Headers.Get(":path"), "?") // Envoy's pseudo-header
	r, err := parseRequest(path, req.Headers.Get("Content-Type"), req.Body, promptMode(router))
	if err != nil {
		return extproc.Pick{}, err
	}
	model, ok := g.view.Model(r.Model)
	if !ok {
		return extproc.Pick{}, errModelNotFound(r.Model)
	}
	if scopeErr != nil {
		return extproc.Pick{}, scopeErr
	}
	cands := p.candidates(model, pool)
	if cands.Len() == 0 {
		return extproc.Pick{}, errModelNotFound(r.Model)
	}
	if req.Subset != nil {
		cands = cands.Filter(func(pod *cache.Pod) bool { return req.Allows(podEndpoint(pod)) })
		if cands.Len() == 0 {
			return extproc.Pick{}, errNoEndpoint(r.Model)
		}
	}
	if routerErr != nil {
		return extproc.Pick{}, errInternal("routing strategy: " + routerErr.Error())
	}
	target, err := g.route(ctx, req.Headers, r, model, router, strategy, cands)
	if err != nil {
		return extproc.Pick{}, err
	}
	res := &pickReservation{
		tracker: g.view.Tracker, admission: g.admission, model: model, tokensIn: r.PromptTokens(),
		primary: target, fallbacks: fallbacks(cands, target.Pod), answer: newAnswerReader(&r, target),
	}
	return extproc.Pick{Endpoints: res.endpoints(), Reservation: res}, nil
}

// policy returns the scope's pool, if it is one, and the RoutingPolicy that routes its
// endpoints: the pool's, or nil (the gateway's default strategy) for a namespace.
func (p *Picker) policy() (*routetable.Pool, *v1alpha1.RoutingPolicy, error) {
	if p.scope.Pool == nil {
		return nil, nil, nil
	}
	pool, ok := p.g.view.Pools.Get(*p.scope.Pool)
	if !ok {
		return nil, nil, errUnavailable(fmt.Sprintf("InferencePool %s does not exist.", p.scope.Pool))
	}
	policy, ok := p.g.view.Policies.Get(pool.Policy)
	if !ok {
		return nil, nil, errInvalidBackend(fmt.Sprintf("RoutingPolicy %s of InferencePool %s does not exist.", pool.Policy, pool.Key))
	}
	return &pool, policy, nil
}

// candidates returns the endpoints of the scope that serve model: a pool's are its
// backend's candidate set, as a route to the pool has them (computed once per version of
// the pods and pools); a namespace's are the model's pods in it.
func (p *Picker) candidates(model *cache.Model, pool *routetable.Pool) cache.PodSet {
	if pool == nil {
		return model.PodSet().Filter(p.scope.contains)
	}
	_, cands := p.g.candidates(routetable.Backend{Service: routetable.PoolService(pool.Key), Port: pool.Port(), Pool: pool}, model, nil)
	return cands
}

// fallbacks returns up to MaxFallbacks endpoints of cands other than primary, fewest
// requests in flight first.
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

// podEndpoint is pod's "ip:port", as the Endpoint Picker Protocol names endpoints: a
// rank's is on its own port.
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
	// answer reads the answer the data plane passes, which is always a 200 answer.
	answer answerReader
}

// endpoints lists the primary, then the fallbacks.
func (r *pickReservation) endpoints() []string {
	eps := []string{podEndpoint(r.primary.Pod)}
	for _, pod := range r.fallbacks {
		eps = append(eps, podEndpoint(pod))
	}
	return eps
}

// Served moves the reservation to the fallback at endpoint, if one is there, and has
// the routing algorithm learn that fallback as the request's endpoint (such as the
// prefix-cache index entry and the session's endpoint).
func (r *pickReservation) Served(endpoint string) {
	if r.moved != nil {
		return
	}
	for _, pod := range r.fallbacks {
		if podEndpoint(pod) == endpoint {
			r.primary.Release(0)
			r.moved = r.tracker.Reserve(r.model, pod, r.tokensIn)
			r.primary.Served(pod)
			return
		}
	}
}

// Answer reads the answer's body as the gateway's own relay does (answerReader): the
// first chunk of an answer that streams marks the request as decoding on the endpoint
// that serves it, and Release passes the usage the answer ends with to the routing
// algorithm.
func (r *pickReservation) Answer(chunk []byte) {
	if r.moved != nil {
		r.answer.read(chunk, r.moved)
		return
	}
	r.answer.read(chunk, r.primary)
}

// Release ends the reservation, wherever it is, first passing the usage the answer
// reported, if any, to the routing algorithm.
func (r *pickReservation) Release() {
	r.answer.report(r.primary)
	r.primary.Release(0)
	if r.moved != nil {
		r.moved.Release(0)
		r.admission.Released(r.moved.Pod())
	}
}
