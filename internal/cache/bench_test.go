package cache

import (
	"cmp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// rwMutexRegistry is the "before" design the benchmarks compare against: one global
// sync.RWMutex around maps that writers update in place. Readers copy the endpoint
// list under the read lock so that they never hold a slice the writer mutates.
type rwMutexRegistry struct {
	mu     sync.RWMutex
	pods   map[endpoint.Key]*endpoint.Endpoint
	models map[string][]*endpoint.Endpoint // sorted by key
}

func newRWMutexRegistry() *rwMutexRegistry {
	return &rwMutexRegistry{
		pods:   make(map[endpoint.Key]*endpoint.Endpoint),
		models: make(map[string][]*endpoint.Endpoint),
	}
}

func (r *rwMutexRegistry) ListEndpoints(model string) []*endpoint.Endpoint {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.models[model])
}

func (r *rwMutexRegistry) UpsertPod(e endpoint.Endpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.pods[e.Key]; ok {
		r.models[old.BaseModel] = slices.DeleteFunc(r.models[old.BaseModel], func(p *endpoint.Endpoint) bool { return p == old })
		if len(r.models[old.BaseModel]) == 0 {
			delete(r.models, old.BaseModel)
		}
	}
	p := &e
	r.pods[e.Key] = p
	if !p.Routable() {
		return
	}
	eps := r.models[p.BaseModel]
	i, _ := slices.BinarySearchFunc(eps, p.Key, func(q *endpoint.Endpoint, k endpoint.Key) int {
		return cmp.Or(cmp.Compare(q.Key.Namespace, k.Namespace), cmp.Compare(q.Key.Name, k.Name))
	})
	r.models[p.BaseModel] = slices.Insert(eps, i, p)
}

// benchPod returns pod i serving model i%100, with one of two addresses by flip.
func benchPod(i int, flip bool) endpoint.Endpoint {
	addr := "10.0.0." + strconv.Itoa(i%250)
	if flip {
		addr = "10.0.1." + strconv.Itoa(i%250)
	}
	return enginePod(i, addr, "m"+strconv.Itoa(i%stressModels), true)
}

// registryUnderTest is what the list benchmark needs from either design.
type registryUnderTest struct {
	upsert func(endpoint.Endpoint)
	list   func(model string) int
}

func BenchmarkListEndpoints(b *testing.B) {
	impls := []struct {
		name string
		make func() registryUnderTest
	}{
		{"snapshot", func() registryUnderTest {
			c := New()
			return registryUnderTest{c.UpsertPod, func(m string) int { return len(c.ListEndpoints(m)) }}
		}},
		{"rwmutex", func() registryUnderTest {
			r := newRWMutexRegistry()
			return registryUnderTest{r.UpsertPod, func(m string) int { return len(r.ListEndpoints(m)) }}
		}},
	}
	models := make([]string, stressModels)
	for i := range models {
		models[i] = "m" + strconv.Itoa(i)
	}
	for _, impl := range impls {
		setup := func(b *testing.B) registryUnderTest {
			reg := impl.make()
			for i := range stressPods {
				reg.upsert(benchPod(i, false))
			}
			if n := reg.list("m0"); n != stressPods/stressModels {
				b.Fatalf("setup: m0 has %d endpoints", n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			return reg
		}
		b.Run(impl.name+"/serial", func(b *testing.B) {
			reg := setup(b)
			i := 0
			for b.Loop() {
				reg.list(models[i%len(models)])
				i++
			}
		})
		b.Run(impl.name+"/parallel_churn", func(b *testing.B) {
			reg := setup(b)
			var (
				stop   atomic.Bool
				writes atomic.Int64
				wg     sync.WaitGroup
			)
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					reg.upsert(benchPod(i%stressPods, i/stressPods%2 == 1))
					writes.Add(1)
				}
			})
			for writes.Load() < 100 { // measure with churn already running
				runtime.Gosched()
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					reg.list(models[i%len(models)])
					i++
				}
			})
			b.StopTimer()
			stop.Store(true)
			wg.Wait()
			b.ReportMetric(float64(writes.Load()), "writes")
		})
	}
}

// BenchmarkSetPool measures one InferencePool update in a namespace of 8 pods, two
// ranks each, while 10,000 engine pods live in other namespaces: the update walks its
// own namespace's pods only.
func BenchmarkSetPool(b *testing.B) {
	c := New()
	for i := range 10_000 {
		e := makePod("other-" + strconv.Itoa(i)).IP("10.1.0.1").Build()
		e.Key.Namespace = "other-" + strconv.Itoa(i%10)
		c.UpsertPod(e)
	}
	for i := range 8 {
		e := makePod("member-" + strconv.Itoa(i)).IP("10.0.0.1").Build()
		e.Labels = map[string]string{"app": "pool"}
		c.UpsertPod(e)
	}
	pool := types.NamespacedName{Namespace: "ns", Name: "pool"}
	selector, ports := map[string]string{"app": "pool"}, []int32{8000, 8001, 8002}
	b.ResetTimer()
	for b.Loop() {
		c.SetPool(pool, selector, ports)
	}
}

// BenchmarkLineTransfer measures how long a cache line written on one core takes to reach
// another on this machine. Two goroutines take turns incrementing one counter, each
// waiting for the other's increment, so that every increment moves the counter's line to
// the other core: ns/op is one move. A routing decision pays about as much for each line
// it reads or writes that a decision on another core wrote since, such as a pod's
// in-flight count after a reservation; BenchmarkRoute's parallel speed-ups follow from it. It
// skips with fewer than two Ps, where the turns would wait on the scheduler instead.
func BenchmarkLineTransfer(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two Ps running at once")
	}
	var turn atomic.Int64
	n := int64(b.N)
	// take makes the increments from first on, every other one, each once turn has
	// reached it.
	take := func(first int64) {
		for i := first; i < n; i += 2 {
			for turn.Load() != i {
			}
			turn.Store(i + 1)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		take(1)
	}()
	take(0)
	<-done
}
