// Package strategies builds routers from RoutingPolicy specs: a Registry maps each
// strategy name of DESIGN §2 to the constructor of its algorithm and wires the policy's
// fallback, staleness threshold and concurrency limits around it.
//
// The package owns no routing logic; the algorithms live in their own packages under
// internal/routing. It does not watch policies or cache routers; the gateway does.
package strategies

import (
	"fmt"
	"strconv"
	"time"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/leastkvcache"
	"github.com/switchboard-llm/switchboard/internal/routing/leastlatency"
	"github.com/switchboard-llm/switchboard/internal/routing/leastrequest"
	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
	"github.com/switchboard-llm/switchboard/internal/routing/random"
	"github.com/switchboard-llm/switchboard/internal/routing/roundrobin"
	"github.com/switchboard-llm/switchboard/internal/routing/sessionaffinity"
	"github.com/switchboard-llm/switchboard/internal/routing/throughput"
	"github.com/switchboard-llm/switchboard/internal/routing/weighted"
)

// DefaultFallback is the strategy that decides when a policy's strategy cannot and the
// policy names no fallback.
const DefaultFallback = v1alpha1.StrategyLeastRequest

// Deps are what the routers of a process share.
type Deps struct {
	// Reserver reserves chosen endpoints. Required.
	Reserver routing.Reserver
	// Admission is where the process's requests wait for capacity; required when
	// Limits.MaxQueued > 0, and every router is built with it.
	Admission *routing.Admission
	// Pods looks up endpoints by key, so that stateful algorithms forget endpoints that
	// left. Required for prefix-cache.
	Pods prefixcache.PodLookup
	// StaleAfter is the age beyond which engine metrics are unknown. Required.
	StaleAfter time.Duration
	// Random breaks ties; nil means routing.DefaultRandom.
	Random routing.Random
	// ObservePrefixMatch, if set, receives the prefix-cache match ratio of every request
	// routed by a prefix-cache algorithm (see prefixcache.Config.ObserveMatch).
	ObservePrefixMatch func(ratio float64)
	// ObservePrefixTrim, if set, receives the number of blocks a prefix-cache index forgot
	// because an engine reported fewer cached tokens than expected (see
	// prefixcache.Config.ObserveTrim).
	ObservePrefixTrim func(blocks int)
	// PrefixBudget, if set, bounds the memory of every prefix-cache index of the routers
	// built, together, whatever their policies' maxBlocksPerEndpoint (see
	// prefixcache.Budget); nil bounds only each policy's endpoints.
	PrefixBudget *prefixcache.Budget
}

// Limits bound the load a router puts on endpoints.
type Limits struct {
	// MaxInFlight caps the requests in flight per endpoint; 0 means no cap.
	MaxInFlight int64
	// MaxQueued, with MaxInFlight, makes the router queue up to this many requests per
	// model while every candidate is at the cap; 0 rejects them at once.
	MaxQueued int
	// MaxQueueWait bounds how long a queued request waits when its policy does not say
	// (spec.queue.maxWait); 0 means until the client gives up.
	MaxQueueWait time.Duration
}

// constructor builds the algorithm of one strategy for spec.
type constructor func(spec *v1alpha1.RoutingPolicySpec, deps Deps) (routing.Scorer, error)

// Registry maps strategy names to their algorithms' constructors. Build one with
// NewRegistry at start-up; it is read-only afterwards and safe for concurrent use.
type Registry struct {
	constructors map[v1alpha1.Strategy]constructor
	deps         Deps
}

// NewRegistry returns a registry of every built-in strategy.
func NewRegistry(deps Deps) *Registry {
	if deps.Random == nil {
		deps.Random = routing.DefaultRandom
	}
	r := &Registry{deps: deps}
	r.constructors = map[v1alpha1.Strategy]constructor{
		v1alpha1.StrategyRandom: func(_ *v1alpha1.RoutingPolicySpec, d Deps) (routing.Scorer, error) {
			return random.New(d.Random), nil
		},
		v1alpha1.StrategyRoundRobin: func(*v1alpha1.RoutingPolicySpec, Deps) (routing.Scorer, error) {
			return roundrobin.New(), nil
		},
		v1alpha1.StrategyLeastRequest: func(_ *v1alpha1.RoutingPolicySpec, d Deps) (routing.Scorer, error) {
			return leastrequest.New(d.Random), nil
		},
		v1alpha1.StrategyLeastKVCache: func(_ *v1alpha1.RoutingPolicySpec, d Deps) (routing.Scorer, error) {
			return leastkvcache.New(d.Random), nil
		},
		v1alpha1.StrategyLeastLatency: func(_ *v1alpha1.RoutingPolicySpec, d Deps) (routing.Scorer, error) {
			return leastlatency.New(d.Random), nil
		},
		v1alpha1.StrategyThroughput: func(_ *v1alpha1.RoutingPolicySpec, d Deps) (routing.Scorer, error) {
			return throughput.New(d.Random), nil
		},
		v1alpha1.StrategyPrefixCache:     newPrefixCache,
		v1alpha1.StrategySessionAffinity: newSessionAffinity,
		v1alpha1.StrategyWeighted:        r.newWeighted,
	}
	return r
}

// Strategies returns the names the registry knows.
func (r *Registry) Strategies() []v1alpha1.Strategy {
	names := make([]v1alpha1.Strategy, 0, len(r.constructors))
	for name := range r.constructors {
		names = append(names, name)
	}
	return names
}

// Knows reports whether name is a strategy of the registry.
func (r *Registry) Knows(name v1alpha1.Strategy) bool {
	_, ok := r.constructors[name]
	return ok
}

// Picker builds the algorithm of strategy name configured by spec.
func (r *Registry) Picker(name v1alpha1.Strategy, spec *v1alpha1.RoutingPolicySpec) (routing.Picker, error) {
	s, err := r.scorer(name, spec)
	if err != nil {
		return nil, err
	}
	if p, ok := s.(routing.Picker); ok {
		return p, nil
	}
	return routing.Highest(s, r.deps.Random), nil
}

// scorer builds the algorithm of strategy name as a Scorer.
func (r *Registry) scorer(name v1alpha1.Strategy, spec *v1alpha1.RoutingPolicySpec) (routing.Scorer, error) {
	build, ok := r.constructors[name]
	if !ok {
		return nil, fmt.Errorf("unknown routing strategy %q", name)
	}
	s, err := build(spec, r.deps)
	if err != nil {
		return nil, fmt.Errorf("build %s router: %w", name, err)
	}
	return s, nil
}

// Router builds the router of a policy: spec's strategy, with spec's fallback (or
// DefaultFallback) when it cannot decide, within limits. strategy, when not empty,
// replaces spec.Strategy (a request's allowed override).
func (r *Registry) Router(spec *v1alpha1.RoutingPolicySpec, strategy v1alpha1.Strategy, limits Limits) (routing.Router, error) {
	if strategy == "" {
		strategy = spec.Strategy
	}
	main, err := r.Picker(strategy, spec)
	if err != nil {
		return nil, err
	}
	fallbackName := DefaultFallback
	if spec.Fallback != nil {
		fallbackName = *spec.Fallback
	}
	fallback, err := r.Picker(fallbackName, spec)
	if err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
	}
	opts := routing.Options{
		Reserver:    r.deps.Reserver,
		Fallback:    fallback,
		StaleAfter:  r.deps.StaleAfter,
		MaxInFlight: limits.MaxInFlight,
		Admission:   r.deps.Admission,
	}
	if limits.MaxInFlight > 0 && limits.MaxQueued > 0 {
		qopts := routing.QueueOptions{MaxQueued: limits.MaxQueued, MaxWait: limits.MaxQueueWait}
		if spec.Queue != nil && spec.Queue.MaxWait != nil {
			qopts.MaxWait = spec.Queue.MaxWait.Duration
		}
		return routing.NewQueue(main, opts, qopts), nil
	}
	return routing.NewRouter(main, opts), nil
}

// newPrefixCache builds the prefix-cache algorithm from spec.prefixCache.
func newPrefixCache(spec *v1alpha1.RoutingPolicySpec, d Deps) (routing.Scorer, error) {
	cfg := prefixcache.Config{Pods: d.Pods, ObserveMatch: d.ObservePrefixMatch, ObserveTrim: d.ObservePrefixTrim,
		Budget: d.PrefixBudget}
	if pc := spec.PrefixCache; pc != nil {
		cfg.BlockSize = int(deref(pc.BlockSize))
		cfg.MaxBlocksPerEndpoint = int(deref(pc.MaxBlocksPerEndpoint))
		cfg.LoadImbalanceThreshold = int64(deref(pc.LoadImbalanceThreshold))
		if pc.MinMatchRatio != nil {
			ratio, err := strconv.ParseFloat(*pc.MinMatchRatio, 64)
			if err != nil || ratio < 0 || ratio > 1 {
				return nil, fmt.Errorf("prefixCache.minMatchRatio %q: want a decimal in [0, 1]", *pc.MinMatchRatio)
			}
			cfg.MinMatchRatio = ratio
		}
	}
	return prefixcache.New(cfg, d.Random), nil
}

// newSessionAffinity builds the session-affinity algorithm from spec.sessionAffinity.
func newSessionAffinity(spec *v1alpha1.RoutingPolicySpec, d Deps) (routing.Scorer, error) {
	var cfg sessionaffinity.Config
	if sa := spec.SessionAffinity; sa != nil {
		cfg.Header = deref(sa.Header)
		if sa.TTL != nil {
			cfg.TTL = sa.TTL.Duration
		}
	}
	return sessionaffinity.New(cfg, d.Random), nil
}

// newWeighted builds the weighted algorithm from spec.scorers, each term built by the
// registry.
func (r *Registry) newWeighted(spec *v1alpha1.RoutingPolicySpec, d Deps) (routing.Scorer, error) {
	terms := make([]weighted.Term, 0, len(spec.Scorers))
	for _, sc := range spec.Scorers {
		if sc.Name == v1alpha1.StrategyWeighted {
			return nil, fmt.Errorf("scorers[].name must not be %s", v1alpha1.StrategyWeighted)
		}
		s, err := r.scorer(sc.Name, spec)
		if err != nil {
			return nil, err
		}
		weight := int32(1)
		if sc.Weight != nil {
			weight = *sc.Weight
		}
		terms = append(terms, weighted.Term{Name: string(sc.Name), Scorer: s, Weight: float64(weight)})
	}
	return weighted.New(terms, d.Random)
}

// deref returns *p, or the zero value when p is nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
