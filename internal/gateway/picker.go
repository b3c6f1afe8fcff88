package gateway

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchboard-llm/switchboard/internal/cache"
)

// PickScope is the explicit set of engine pods the Envoy ext_proc endpoint picker may
// choose from: those of one namespace whose labels match a selector. The picker serves no
// HTTPRoute, so without a scope it would choose among every engine of the cluster.
type PickScope struct {
	// Namespace is the namespace of the pods; required.
	Namespace string
	// Selector selects the pods by label; nil or empty selects every engine pod of the
	// namespace.
	Selector labels.Selector
}

// contains reports whether p is in the scope.
func (s PickScope) contains(p *cache.Pod) bool {
	return p.Key.Namespace == s.Namespace && (s.Selector == nil || s.Selector.Matches(labels.Set(p.Labels)))
}

// Picker is the endpoint picker that Envoy's ext_proc filter asks: it chooses and
// reserves, with the gateway's default strategy, a ready engine pod in its scope that
// serves the request's model.
type Picker struct {
	g     *Gateway
	scope PickScope
}

// Picker returns the endpoint picker of scope.
func (g *Gateway) Picker(scope PickScope) *Picker { return &Picker{g: g, scope: scope} }

// Pick chooses and reserves an endpoint for an OpenAI-compatible request body. release
// MUST be called once when the response ends. A model that no pod in the scope serves is
// answered 404, one whose pods in the scope are all busy or excluded 503. Errors carry
// their HTTP status (Error.HTTPStatus).
func (p *Picker) Pick(ctx context.Context, headers http.Header, body []byte) (endpoint string, release func(), err error) {
	g := p.g
	path, _, _ := strings.Cut(headers.Get(":path"), "?") // Envoy's pseudo-header
	req, err := parseRequest(path, headers.Get("Content-Type"), body)
	if err != nil {
		return "", nil, err
	}
	model, ok := g.view.Model(req.Model)
	if !ok {
		return "", nil, errModelNotFound(req.Model)
	}
	cands := model.PodSet().Filter(p.scope.contains)
	if cands.Len() == 0 {
		return "", nil, errModelNotFound(req.Model)
	}
	router, strategy, err := g.router(nil, "")
	if err != nil {
		return "", nil, errInternal("default strategy: " + err.Error())
	}
	target, err := g.route(ctx, headers, req, model, router, strategy, cands)
	if err != nil {
		return "", nil, err
	}
	pod := target.Pod
	return net.JoinHostPort(pod.Address, strconv.Itoa(int(pod.Port))), func() { target.Release(0) }, nil
}
