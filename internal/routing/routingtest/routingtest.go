// Package routingtest builds fleets of engine pods, routing contexts and seeded
// randomness for the tests and benchmarks of routing algorithms.
package routingtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// StaleAfter is the staleness threshold Candidates applies.
const StaleAfter = time.Minute

// Fleet is a metadata cache holding n ready vLLM pods "ns/p0000".."ns/p<n-1>" that serve
// one model.
type Fleet struct {
	// Cache holds the pods.
	Cache *cache.Cache
	// Model is the served model's name.
	Model string
}

// NewFleet returns a fleet of n pods serving model.
func NewFleet(model string, n int) *Fleet {
	f := &Fleet{Cache: cache.New(), Model: model}
	for i := range n {
		f.Cache.UpsertPod(endpoint.Endpoint{
			Key:       Key(i),
			Address:   fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255),
			Port:      8000,
			BaseModel: model,
			Engine:    endpoint.EngineVLLM,
			Ready:     true,
		})
	}
	return f
}

// Key returns the key of pod i.
func Key(i int) endpoint.Key { return endpoint.Key{Namespace: "ns", Name: fmt.Sprintf("p%04d", i)} }

// Pod returns pod i.
func (f *Fleet) Pod(i int) *cache.Pod {
	p, ok := f.Cache.Pod(Key(i))
	if !ok {
		panic(fmt.Sprintf("routingtest: no pod %d", i))
	}
	return p
}

// Pods returns the routable pods serving the model, ordered by name.
func (f *Fleet) Pods() []*cache.Pod { return f.Cache.ListEndpoints(f.Model) }

// SetMetrics stores m as pod i's metrics, stamped now unless m.ScrapedAt is set.
func (f *Fleet) SetMetrics(i int, m endpoint.Metrics) {
	if m.ScrapedAt.IsZero() {
		m.ScrapedAt = time.Now()
	}
	f.Cache.SetMetrics(f.Pod(i), m)
}

// Reserve counts n requests in flight on pod i.
func (f *Fleet) Reserve(i, n int) {
	m, _ := f.Cache.Model(f.Model)
	for range n {
		cache.Tracker{}.Reserve(m, f.Pod(i), 0)
	}
}

// Context returns a routing context for req (its Model set to the fleet's) with every
// routable pod as a candidate: the model's own immutable pod list, as the gateway hands
// out its precomputed candidate sets.
func (f *Fleet) Context(req routing.Request) *routing.RoutingContext {
	rc := new(routing.RoutingContext)
	f.InitContext(rc, req)
	return rc
}

// InitContext is Context into rc (see routing.RoutingContext.Init).
func (f *Fleet) InitContext(rc *routing.RoutingContext, req routing.Request) {
	req.Model = f.Model
	m, _ := f.Cache.Model(f.Model)
	var pods cache.PodSet
	if m != nil {
		pods = m.PodSet()
	}
	rc.Init(context.Background(), req, m, pods)
}

// Candidates returns rc's candidates as a router offers them to an algorithm: with their
// current in-flight counts and metrics no older than StaleAfter.
func Candidates(rc *routing.RoutingContext) []routing.Candidate {
	cands := make([]routing.Candidate, len(rc.Candidates))
	for i, p := range rc.Candidates {
		cands[i] = routing.Candidate{Pod: p, InFlight: p.Load().InFlight(), Metrics: p.FreshMetrics(rc.Now, StaleAfter)}
	}
	return cands
}

// SeededRandom returns a deterministic routing.Random, safe for concurrent use.
func SeededRandom(seed uint64) routing.Random {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return r.IntN(n)
	}
}
