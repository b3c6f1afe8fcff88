package cache

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// Pod is the published view of one engine pod. The embedded Endpoint never changes after
// publication; a pod update publishes a new Pod. The request counters and the metrics
// pointer are shared by every version of the pod with the same key (the metrics start
// over when the pod's address or port changes), so a reservation taken on an old version is
// released on the same counters.
type Pod struct {
	endpoint.Endpoint

	// load is written by reservations and read by anyone; shared across versions.
	load *Load
	// metrics is stored by SetMetrics (scrapers) and loaded by anyone.
	metrics *atomic.Pointer[endpoint.Metrics]
}

// Load returns the pod's request counters.
func (p *Pod) Load() *Load { return p.load }

// Metrics returns the latest metrics snapshot, or nil before the first scrape. The
// returned value is never modified.
func (p *Pod) Metrics() *endpoint.Metrics { return p.metrics.Load() }

// FreshMetrics returns the latest metrics snapshot if it is at most maxAge old at now, and
// nil when there is none or it is stale. Routers treat nil as unknown.
func (p *Pod) FreshMetrics(now time.Time, maxAge time.Duration) *endpoint.Metrics {
	m := p.metrics.Load()
	if m == nil || m.Stale(now, maxAge) {
		return nil
	}
	return m
}

// Model is the published view of a model name: a base model or a LoRA adapter and the
// routable pods that serve it. It never changes after publication except for its
// request counters.
type Model struct {
	// Name is the model name requests use.
	Name string
	// BaseModel is the base model; equal to Name unless the model is an adapter.
	BaseModel string

	// endpoints is sorted by key and never modified after publication.
	endpoints []*Pod
	// load is written by reservations and read by anyone; shared across versions of the
	// model while it keeps at least one endpoint.
	load *Load
}

// IsAdapter reports whether the model is a LoRA adapter on top of BaseModel.
func (m *Model) IsAdapter() bool { return m.Name != m.BaseModel }

// Endpoints returns a fresh slice of the routable pods serving the model, sorted by key.
func (m *Model) Endpoints() []*Pod { return slices.Clone(m.endpoints) }

// Load returns the model's request counters.
func (m *Model) Load() *Load { return m.load }

// podShards is the number of maps the pod registry is split into, so that a pod change
// copies one small map rather than all pods.
const podShards = 32

// podShardMap is one immutable shard of the pod registry.
type podShardMap map[endpoint.Key]*Pod

// snapshot is one immutable generation of the registries. Generations share every shard
// and model a write did not touch.
type snapshot struct {
	pods       [podShards]podShardMap
	models     map[string]*Model
	modelNames []string
	// namespaces holds every pod of each namespace, sorted by name; each slice is
	// replaced, never modified, when one of its pods changes.
	namespaces map[string][]*Pod
}

// shardOf returns the pod shard holding k (FNV-1a of the key).
func shardOf(k endpoint.Key) int {
	h := uint32(2166136261)
	for _, s := range [...]string{k.Namespace, "/", k.Name} {
		for i := range len(s) {
			h = (h ^ uint32(s[i])) * 16777619
		}
	}
	return int(h % podShards)
}

// pod returns the pod with key k.
func (s *snapshot) pod(k endpoint.Key) (*Pod, bool) {
	p, ok := s.pods[shardOf(k)][k]
	return p, ok
}

// podRecord is the writer's copy of one pod's input and shared state.
type podRecord struct {
	ep      endpoint.Endpoint
	load    *Load
	metrics *atomic.Pointer[endpoint.Metrics]
	// published is the Pod last published for ep, reused while its adapters stay equal.
	published *Pod
}

// adapterRecord is the writer's copy of one ModelAdapter's status.
type adapterRecord struct {
	baseModel string
	instances []string
}

// Reader reads the pod and model registries of one Cache. It takes no lock: every value
// it returns is part of an immutable snapshot or a fresh slice.
type Reader struct {
	snap *atomic.Pointer[snapshot]
}

// Cache holds the pod and model registries and their request counters. Create it with
// New; it is safe for concurrent use.
//
// Readers (the embedded Reader) load the current snapshot without locking. Writers (UpsertPod, DeletePod, SetAdapterInstances, DeleteAdapter) hold mu, update the
// writer-owned records and publish a new snapshot. SetMetrics swaps one pod's metrics
// pointer without locking or publishing.
type Cache struct {
	Reader

	// snap is stored by writers holding mu and loaded by readers without a lock.
	snap atomic.Pointer[snapshot]

	// mu serialises writers and guards the fields below; readers never take it.
	mu         sync.Mutex
	pods       map[endpoint.Key]*podRecord
	adapters   map[endpoint.Key]adapterRecord
	modelLoads map[string]*Load
}

// New returns an empty cache.
func New() *Cache {
	c := &Cache{
		pods:       make(map[endpoint.Key]*podRecord),
		adapters:   make(map[endpoint.Key]adapterRecord),
		modelLoads: make(map[string]*Load),
	}
	c.Reader = Reader{snap: &c.snap}
	c.snap.Store(&snapshot{models: map[string]*Model{}, namespaces: map[string][]*Pod{}})
	return c
}

// Pod returns the pod with key k, routable or not.
func (r Reader) Pod(k endpoint.Key) (*Pod, bool) {
	return r.snap.Load().pod(k)
}

// Model returns the model named name; it exists while at least one routable pod serves it.
func (r Reader) Model(name string) (*Model, bool) {
	m, ok := r.snap.Load().models[name]
	return m, ok
}

// ListEndpoints returns a fresh slice of the routable pods serving model, sorted by key,
// or nil if no pod serves it.
func (r Reader) ListEndpoints(model string) []*Pod {
	m, ok := r.Model(model)
	if !ok {
		return nil
	}
	return m.Endpoints()
}

// NamespacePods returns every known pod of namespace ns, routable or not, sorted by name.
// The slice is shared with every reader and MUST NOT be modified.
func (r Reader) NamespacePods(ns string) []*Pod { return r.snap.Load().namespaces[ns] }

// ListPods returns a fresh slice of every known pod, routable or not, in no particular
// order.
func (r Reader) ListPods() []*Pod {
	snap := r.snap.Load()
	var pods []*Pod
	for _, shard := range snap.pods {
		for _, p := range shard {
			pods = append(pods, p)
		}
	}
	return pods
}

// Models returns a fresh, sorted slice of the names of all served models and adapters.
func (r Reader) Models() []string { return slices.Clone(r.snap.Load().modelNames) }

// SetMetrics stores m as the latest metrics of scraped, the version of a pod whose
// /metrics was read, provided the pod still has the address and port scraped. It reports
// whether m was stored. A scrape that races with a move is discarded with the old
// address's metrics.
func (c *Cache) SetMetrics(scraped *Pod, m endpoint.Metrics) bool {
	p, ok := c.Pod(scraped.Key)
	if !ok || p.metrics != scraped.metrics {
		return false
	}
	p.metrics.Store(&m)
	return true
}

// UpsertPod adds or replaces the pod e.Key. e.Adapters is ignored: adapters come from
// SetAdapterInstances. e.Labels is copied. Metrics are dropped when the address or port
// changes.
func (c *Cache) UpsertPod(e endpoint.Endpoint) {
	e.Labels = maps.Clone(e.Labels)
	e.Adapters = nil

	c.mu.Lock()
	defer c.mu.Unlock()
	rec, ok := c.pods[e.Key]
	switch {
	case !ok:
		rec = &podRecord{load: new(Load), metrics: new(atomic.Pointer[endpoint.Metrics])}
		c.pods[e.Key] = rec
	case rec.ep.Address != e.Address || rec.ep.Port != e.Port:
		rec.metrics = new(atomic.Pointer[endpoint.Metrics])
	}
	rec.ep = e
	c.publishPod(e.Key)
}

// DeletePod removes the pod with key k, if present.
func (c *Cache) DeletePod(k endpoint.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pods[k]; !ok {
		return
	}
	delete(c.pods, k)
	c.publishPod(k)
}

// SetAdapterInstances records that the ModelAdapter adapter, on top of baseModel, is
// loaded on the pods named in instances (in adapter's namespace), replacing any earlier
// mapping. The adapter is served, under the name adapter.Name, by those instances that
// are routable and serve baseModel.
func (c *Cache) SetAdapterInstances(adapter endpoint.Key, baseModel string, instances []string) {
	rec := adapterRecord{baseModel: baseModel, instances: slices.Clone(instances)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.adapters[adapter] = rec
	c.publish()
}

// DeleteAdapter removes the ModelAdapter adapter and its mappings, if present.
func (c *Cache) DeleteAdapter(adapter endpoint.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.adapters[adapter]; !ok {
		return
	}
	delete(c.adapters, adapter)
	c.publish()
}

// publishPod publishes a snapshot in which only the pod k and the models it served or
// now serves changed; the rest is shared with the current snapshot. The caller holds c.mu.
func (c *Cache) publishPod(k endpoint.Key) {
	prev := c.snap.Load()
	next := &snapshot{pods: prev.pods, models: maps.Clone(prev.models), modelNames: prev.modelNames, namespaces: maps.Clone(prev.namespaces)}
	shard := shardOf(k)
	next.pods[shard] = maps.Clone(prev.pods[shard])
	if next.pods[shard] == nil {
		next.pods[shard] = make(podShardMap)
	}

	affected := make(map[string]string) // model name -> base model
	if old, ok := prev.pod(k); ok && old.IsEngine() && old.Routable() {
		affected[old.BaseModel] = old.BaseModel
		for _, a := range old.Adapters {
			affected[a] = old.BaseModel
		}
	}
	delete(next.pods[shard], k)
	var p *Pod
	if rec, ok := c.pods[k]; ok {
		ep := rec.ep
		ep.Adapters = c.adaptersOf(k, ep.BaseModel)
		p = &Pod{Endpoint: ep, load: rec.load, metrics: rec.metrics}
		rec.published = p
		next.pods[shard][k] = p
		if p.IsEngine() && p.Routable() {
			affected[p.BaseModel] = p.BaseModel
			for _, a := range p.Adapters {
				affected[a] = p.BaseModel
			}
		}
	}

	nsPods := slices.DeleteFunc(slices.Clone(prev.namespaces[k.Namespace]), func(q *Pod) bool { return q.Key == k })
	if p != nil {
		i, _ := slices.BinarySearchFunc(nsPods, k, func(q *Pod, k endpoint.Key) int { return compareKeys(q.Key, k) })
		nsPods = slices.Insert(nsPods, i, p)
	}
	if len(nsPods) == 0 {
		delete(next.namespaces, k.Namespace)
	} else {
		next.namespaces[k.Namespace] = nsPods
	}

	namesChanged := false
	for name, base := range affected {
		var eps []*Pod
		if m, ok := prev.models[name]; ok {
			eps = slices.DeleteFunc(slices.Clone(m.endpoints), func(q *Pod) bool { return q.Key == k })
		}
		if p != nil && p.IsEngine() && p.Routable() && (p.BaseModel == name || slices.Contains(p.Adapters, name)) {
			i, _ := slices.BinarySearchFunc(eps, k, func(q *Pod, k endpoint.Key) int { return compareKeys(q.Key, k) })
			eps = slices.Insert(eps, i, p)
		}
		_, existed := prev.models[name]
		if len(eps) == 0 {
			delete(next.models, name)
			delete(c.modelLoads, name)
			namesChanged = namesChanged || existed
			continue
		}
		namesChanged = namesChanged || !existed
		next.models[name] = &Model{Name: name, BaseModel: base, endpoints: eps, load: c.modelLoad(name)}
	}
	if namesChanged {
		next.modelNames = slices.Sorted(maps.Keys(next.models))
	}
	c.snap.Store(next)
}

// adaptersOf returns the sorted names of adapters on top of base whose instances include
// the pod k. The caller holds c.mu.
func (c *Cache) adaptersOf(k endpoint.Key, base string) []string {
	var names []string
	for ak, a := range c.adapters {
		if ak.Namespace == k.Namespace && a.baseModel == base && slices.Contains(a.instances, k.Name) {
			names = append(names, ak.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// modelLoad returns the request counters of model name, creating them on first use. The
// caller holds c.mu.
func (c *Cache) modelLoad(name string) *Load {
	l, ok := c.modelLoads[name]
	if !ok {
		l = new(Load)
		c.modelLoads[name] = l
	}
	return l
}

// compareKeys orders keys by namespace, then name.
func compareKeys(a, b endpoint.Key) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// publish builds a whole new snapshot from the writer-owned records and stores it; used
// when an adapter mapping changes, which can touch many pods. The caller holds c.mu.
func (c *Cache) publish() {
	podAdapters := make(map[endpoint.Key][]string)
	bases := make(map[string]string) // model name -> base model
	for ak, a := range c.adapters {
		for _, name := range a.instances {
			k := endpoint.Key{Namespace: ak.Namespace, Name: name}
			if rec, ok := c.pods[k]; ok && rec.ep.BaseModel == a.baseModel {
				podAdapters[k] = append(podAdapters[k], ak.Name)
				bases[ak.Name] = a.baseModel
			}
		}
	}

	next := &snapshot{models: make(map[string]*Model), namespaces: make(map[string][]*Pod)}
	for i := range next.pods {
		next.pods[i] = make(podShardMap, len(c.pods)/podShards)
	}
	for k, rec := range c.pods {
		adapters := podAdapters[k]
		slices.Sort(adapters)
		adapters = slices.Compact(adapters)
		if rec.published == nil || !slices.Equal(rec.published.Adapters, adapters) {
			ep := rec.ep
			ep.Adapters = adapters
			rec.published = &Pod{Endpoint: ep, load: rec.load, metrics: rec.metrics}
		}
		p := rec.published
		next.pods[shardOf(k)][k] = p
		next.namespaces[k.Namespace] = append(next.namespaces[k.Namespace], p)
		if !p.IsEngine() || !p.Routable() {
			continue
		}
		c.addEndpoint(next.models, p.BaseModel, p.BaseModel, p)
		for _, a := range p.Adapters {
			c.addEndpoint(next.models, a, bases[a], p)
		}
	}

	for _, pods := range next.namespaces {
		slices.SortFunc(pods, func(a, b *Pod) int { return compareKeys(a.Key, b.Key) })
	}
	next.modelNames = make([]string, 0, len(next.models))
	for name, m := range next.models {
		slices.SortFunc(m.endpoints, func(a, b *Pod) int { return compareKeys(a.Key, b.Key) })
		next.modelNames = append(next.modelNames, name)
	}
	slices.Sort(next.modelNames)
	maps.DeleteFunc(c.modelLoads, func(name string, _ *Load) bool {
		_, ok := next.models[name]
		return !ok
	})
	c.snap.Store(next)
}

// addEndpoint appends p to the model name in models, creating the model with the
// counters kept in c.modelLoads. The caller holds c.mu.
func (c *Cache) addEndpoint(models map[string]*Model, name, base string, p *Pod) {
	m, ok := models[name]
	if !ok {
		m = &Model{Name: name, BaseModel: base, load: c.modelLoad(name)}
		models[name] = m
	}
	m.endpoints = append(m.endpoints, p)
}
