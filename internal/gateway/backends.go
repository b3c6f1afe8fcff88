package gateway

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// errNoBackendLeft means every backend of a rule with weight has been left out for
// having no candidate endpoint.
var errNoBackendLeft = errors.New("no backend has a candidate endpoint")

// backendChoice draws the backends of one rule by weight (Gateway API traffic
// splitting). The rejected backends keep their share, which is answered with 500; a
// backend without candidates is skipped, and its share goes to the others. It belongs to
// one request.
type backendChoice struct {
	rule    *routetable.Rule
	rnd     routing.Random
	skipped []bool
}

func newBackendChoice(rule *routetable.Rule, rnd routing.Random) *backendChoice {
	return &backendChoice{rule: rule, rnd: rnd, skipped: make([]bool, len(rule.Backends))}
}

// next returns the index in rule.Backends of the backend the request goes to. It fails
// with a 500 Error when the draw lands on a rejected backend or the rule has no backend
// with weight, and with errNoBackendLeft when every backend with weight was skipped.
func (c *backendChoice) next() (int, error) {
	var usable, rejected int
	for i, b := range c.rule.Backends {
		if !c.skipped[i] {
			usable += int(b.Weight)
		}
	}
	for _, rb := range c.rule.RejectedBackends {
		rejected += int(rb.Weight)
	}
	if usable+rejected == 0 {
		if c.anyWeight() {
			return -1, errNoBackendLeft
		}
		return -1, errInvalidBackend("The route rule has no backend that can receive requests.")
	}
	n := c.rnd(usable + rejected)
	for _, rb := range c.rule.RejectedBackends {
		if n < int(rb.Weight) {
			return -1, errInvalidBackend(fmt.Sprintf("The route rule's backend %s cannot be used: %s.", rb.Target, rb.Message))
		}
		n -= int(rb.Weight)
	}
	for i, b := range c.rule.Backends {
		if c.skipped[i] {
			continue
		}
		if n < int(b.Weight) {
			return i, nil
		}
		n -= int(b.Weight)
	}
	return -1, errNoBackendLeft // unreachable: n < usable
}

// anyWeight reports whether a usable backend of the rule has weight.
func (c *backendChoice) anyWeight() bool {
	for _, b := range c.rule.Backends {
		if b.Weight > 0 {
			return true
		}
	}
	return false
}

// skip leaves backend i out of later draws.
func (c *backendChoice) skip(i int) { c.skipped[i] = true }

// reset makes every backend drawable again.
func (c *backendChoice) reset() { clear(c.skipped) }

// candidates returns the Service of backend and its routable pods that may receive the
// request, minus those in exclude: for a model (inference rules), the model's endpoints
// the Service selects; for nil (plain rules), every pod it selects. Pods whose port the
// Service cannot resolve are left out. Nothing outside the Service is ever returned.
//
// The set without exclusions is computed once per version of the pods and Services and
// shared by every request until either changes; it MUST NOT be modified.
func (g *Gateway) candidates(backend routetable.Backend, model *cache.Model, exclude map[*cache.Pod]bool) (cache.Service, cache.PodSet) {
	set := g.candidateSet(backend, model)
	if len(exclude) == 0 {
		return set.svc, set.pods
	}
	return set.svc, set.pods.Filter(func(p *cache.Pod) bool { return !exclude[p] })
}

// candidateKey names a candidate set: a backend's Service and port, and a model ("" on
// plain rules).
type candidateKey struct {
	service types.NamespacedName
	port    int32
	model   string
}

// candidateSet is a backend's Service and the pods it may send a model's requests to.
type candidateSet struct {
	svc  cache.Service
	pods cache.PodSet
}

// candidateSets are the candidate sets computed from one version of the pods (pods) and
// of the Services (services); a newer version of either starts an empty generation.
type candidateSets struct {
	pods, services uint64
	sets           sync.Map // candidateKey -> *candidateSet
}

// candidateSet returns the candidate set of backend for model, computing it on first use
// in the current generation.
func (g *Gateway) candidateSet(backend routetable.Backend, model *cache.Model) *candidateSet {
	// Versions first, data second: a set is never older than the versions it is filed under.
	pods, services := g.view.Version(), g.view.Services.Version()
	gen := g.candidateSets.Load()
	for gen == nil || gen.pods < pods || gen.services < services {
		if g.candidateSets.CompareAndSwap(gen, &candidateSets{pods: pods, services: services}) {
			gen = g.candidateSets.Load()
			break
		}
		gen = g.candidateSets.Load()
	}
	key := candidateKey{service: backend.Service, port: backend.Port}
	if model != nil {
		key.model = model.Name
	}
	if set, ok := gen.sets.Load(key); ok {
		return set.(*candidateSet)
	}
	set := g.computeCandidates(backend, model)
	actual, _ := gen.sets.LoadOrStore(key, set)
	return actual.(*candidateSet)
}

// computeCandidates selects the candidate set of backend for model from the current pods.
func (g *Gateway) computeCandidates(backend routetable.Backend, model *cache.Model) *candidateSet {
	svc, ok := g.view.Services.Get(backend.Service)
	if !ok || !svc.HasPort(backend.Port) {
		return &candidateSet{svc: svc}
	}
	var pool []*cache.Pod
	if model != nil {
		if current, ok := g.view.Model(model.Name); ok {
			model = current // the request's model may be of an older version
		}
		pool = model.Pods()
	} else {
		pool = g.view.NamespacePods(backend.Service.Namespace)
	}
	var out []*cache.Pod
	for _, p := range pool {
		if !p.Routable() || !svc.Selects(p) {
			continue
		}
		if _, ok := svc.TargetPort(backend.Port, p); ok {
			out = append(out, p)
		}
	}
	return &candidateSet{svc: svc, pods: cache.NewPodSet(slices.Clip(out))}
}

// servesModel reports whether a backend of rule selects any pod, ready or not, whose
// engine serves model's base model: if none does, the model is not served on the rule.
func (g *Gateway) servesModel(rule *routetable.Rule, model *cache.Model) bool {
	for _, b := range rule.Backends {
		svc, ok := g.view.Services.Get(b.Service)
		if !ok {
			continue
		}
		for _, p := range g.view.NamespacePods(b.Service.Namespace) {
			if p.BaseModel == model.BaseModel && svc.Selects(p) {
				return true
			}
		}
	}
	return false
}
