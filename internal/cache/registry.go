package cache

import (
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// Pod is the published view of one engine pod. The embedded Endpoint never changes after
// publication; a pod update publishes a new Pod. The request counters and the metrics
// pointer are shared by every version of the pod with the same key (the metrics start
// over when the pod's address or port changes), so a reservation taken on an old version is
// released on the same counters.
type Pod struct {
	endpoint.Endpoint

	// hot holds the metrics summary; state holds the request counters, written by
	// reservations, hot and the metrics, stored by SetMetrics (scrapers). Both are read
	// by anyone and shared across versions.
	hot   *Hot
	state *podState
	// gen is the state's gen when this version was published; the metrics of a scrape
	// of an older gen (the pod moved since) are discarded.
	gen uint64
	// session identifies the engine session this version belongs to (see Cache); a model
	// listing of another session is discarded.
	session uint64
}

// Load returns the pod's request counters.
func (p *Pod) Load() *Load { return &p.state.load }

// MeanAge returns how long, on average, the pod's in-flight requests have run as of now
// (Load.MeanAge).
func (p *Pod) MeanAge(now time.Time) time.Duration { return p.state.load.MeanAge(now) }

// Hot returns the pod's hot cell.
func (p *Pod) Hot() *Hot { return p.hot }

// ID returns the pod's key as headers, logs and metrics name it (Key.String), without
// building the string per request.
func (p *Pod) ID() string { return p.state.id[0] }

// IDHeader returns ID as the values of a header, one slice shared by every caller: it
// MUST NOT be written into (appending copies it, since its capacity is its length).
func (p *Pod) IDHeader() []string { return p.state.id }

// Metrics returns the latest metrics snapshot, or nil before the first scrape. The
// returned value is never modified.
func (p *Pod) Metrics() *endpoint.Metrics { return p.state.metrics.Load() }

// FreshMetrics returns the latest metrics snapshot if it is at most maxAge old at now, and
// nil when there is none or it is stale. Routers treat nil as unknown.
func (p *Pod) FreshMetrics(now time.Time, maxAge time.Duration) *endpoint.Metrics {
	m := p.Metrics()
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

	// endpoints is sorted by key and never modified after publication: asBase when any
	// pod serves the name as its base model, otherwise asAdapter.
	endpoints PodSet
	// asBase and asAdapter are the routable pods that serve the name as their base model
	// and as a LoRA adapter, sorted by key and never modified after publication.
	asBase, asAdapter []*Pod
	// load is written by reservations and read by anyone; shared across versions of the
	// model while it keeps at least one endpoint.
	load *ModelLoad
}

// IsAdapter reports whether the model is a LoRA adapter on top of BaseModel.
func (m *Model) IsAdapter() bool { return m.Name != m.BaseModel }

// Endpoints returns a fresh slice of the routable pods serving the model, sorted by key.
func (m *Model) Endpoints() []*Pod { return slices.Clone(m.endpoints.Pods) }

// Pods is Endpoints without the copy, for the request path: the slice is shared with
// every reader and MUST NOT be modified.
func (m *Model) Pods() []*Pod { return m.endpoints.Pods }

// PodSet is Pods with their hot cells, as routing decisions take candidates. It is shared
// with every reader and MUST NOT be modified.
func (m *Model) PodSet() PodSet { return m.endpoints }

// Load returns the model's request counters.
func (m *Model) Load() *ModelLoad { return m.load }

// podShards is the number of maps the pod registry is split into, so that a pod change
// copies one small map rather than all pods.
const podShards = 32

// podShardMap is one immutable shard of the pod registry.
type podShardMap map[endpoint.Key]*Pod

// snapshot is one immutable generation of the registries. Generations share every shard
// and model a write did not touch.
type snapshot struct {
	// version counts the generations: each publication adds one.
	version    uint64
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

// podRecord is the writer's copy of one endpoint's input and shared state: a pod's own
// or a rank's.
type podRecord struct {
	ep    endpoint.Endpoint
	state *podState
	gen   uint64 // the state's gen for ep's address and port
	// session is the pod's current engine session; see Cache.
	session uint64
	// listing is the latest successful model listing of the session; nil before the first.
	listing *modelListing
	// loraSeen are the adapters named by vllm:lora_requests_info in the latest metrics
	// snapshot, sorted; reset with the metrics.
	loraSeen []string
	// published is the Pod last published for ep, reused while its adapters stay equal.
	published *Pod
	// ranks are, for a pod's own record, the sorted ports of its ranks' records.
	ranks []int32
}

// poolRecord is the writer's copy of what one InferencePool selects.
type poolRecord struct {
	selector map[string]string
	ports    []int32
}

// adapterRecord is the writer's copy of one ModelAdapter's status.
type adapterRecord struct {
	baseModel string
	// instances maps each pod named in status.instances to when the cache received the
	// first status naming it (of an unbroken run of statuses naming it).
	instances map[string]time.Time
}

// Reader reads the pod and model registries of one Cache. It takes no lock: every value
// it returns is part of an immutable snapshot or a fresh slice.
type Reader struct {
	snap *atomic.Pointer[snapshot]
}

// Cache holds the pod and model registries and their request counters. Create it with
// New; it is safe for concurrent use.
//
// # Served models
//
// A routable engine pod serves its base model (the switchboard.dev/model label) and the
// LoRA adapters joined from the sources below, all scoped to the pod's current engine
// session. A session begins when the pod is first seen and again whenever its address or
// port changes or it stops being routable (an engine restarting inside its pod keeps the
// address but passes through not-ready); everything learnt from the engine belongs to
// one session and is forgotten when it ends.
//
//  1. The engine's listing (GET /v1/models, stored by SetModelListing) is the truth for
//     what the engine serves. An entry other than the base model whose parent is the
//     pod's base model, or the root of the listing's base-model entry, is a served
//     adapter, whether or not a ModelAdapter exists. Entries with another parent or none
//     are ignored, so that an engine cannot make its pod serve a model under a different
//     base. A failed listing keeps the last successful one; an engine that refuses to be
//     listed (401 or 403; the cache holds no engine credentials, unlike the manager's
//     ModelAdapter controller, which uses spec.credentialsSecretRef) has its listing
//     forgotten (ForgetModelListing), falling back to 2 and 3.
//  2. ModelAdapter placement (SetAdapterInstances): adapter A whose spec.baseModel is the
//     pod's base model and whose status.instances names the pod is served on the pod
//     until a listing has been read that was requested after the cache received that
//     instance record; from then on the engine wins and A is served there only if the
//     latest listing has it. So, before the first listing of a session (right after a
//     pod starts, for engines that refuse to be listed, and in the manager context,
//     which lists nothing), placement alone decides, and a placement newer than the
//     latest listing is trusted until the next listing confirms or refutes it.
//  3. vllm:lora_requests_info (SetMetrics): while the session has no listing, the adapters
//     named in the running or waiting labels of the latest metrics snapshot are served
//     too, as confirmation that the engine holds them, provided a ModelAdapter of that
//     name in the pod's namespace declares the pod's base model (the info names no
//     parent).
//
// A model name served by some routable pod as its base model is routed to those pods
// only, never to pods that merely have an adapter of that name.
//
// # Ranks
//
// An InferencePool (SetPool) makes every one of its targetPorts of every pod it selects an
// endpoint of its own, a rank (endpoint.Key.Port): a data-parallel engine server with its
// own metrics (the Scraper scrapes every entry's address and port), load counters, model
// listing and engine session. A rank is a copy of its pod's endpoint on its port, kept in
// step with the pod; the targetPort equal to the pod's own engine port is the pod's own
// endpoint, not a rank, so a pool on its pods' engine port adds no entry. Ranks serve the
// pod's base model and the adapters their own engine's listing (or, before the first,
// vllm:lora_requests_info) names: ModelAdapter status.instances names pods, which the
// ModelAdapter controller loads through their own engine port, so placement claims the
// pod's own endpoint only. Only pools' Services select ranks (Service.Selects).
//
// # Synchronisation
//
// Readers (the embedded Reader) load the current snapshot without locking. Writers
// (UpsertPod, DeletePod, SetPool, DeletePool, SetAdapterInstances, DeleteAdapter,
// SetModelListing, ForgetModelListing) hold mu, update the writer-owned records and
// publish a new snapshot; a listing republishes only its pod, and only when the pod's
// served adapters change. SetMetrics stores one pod's metrics in its hot cell without publishing,
// unless the adapters named by lora_requests_info change.
type Cache struct {
	Reader

	// snap is stored by writers holding mu and loaded by readers without a lock.
	snap atomic.Pointer[snapshot]

	// mu serialises writers and guards the fields below; readers never take it.
	mu         sync.Mutex
	pods       map[endpoint.Key]*podRecord
	pools      map[types.NamespacedName]poolRecord
	adapters   map[endpoint.Key]adapterRecord
	modelLoads map[string]*ModelLoad
	// cells allocates the pods' hot cells.
	cells hotAllocator
	// sessions is the last engine session number handed out.
	sessions uint64
}

// New returns an empty cache.
func New() *Cache {
	c := &Cache{
		pods:       make(map[endpoint.Key]*podRecord),
		pools:      make(map[types.NamespacedName]poolRecord),
		adapters:   make(map[endpoint.Key]adapterRecord),
		modelLoads: make(map[string]*ModelLoad),
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

// Version returns a number that grows whenever the pods or models change (not their
// metrics or counters), so that a reader can keep what it derives from them until then.
func (r Reader) Version() uint64 { return r.snap.Load().version }

// NamespacePods returns every known endpoint of namespace ns (pods' own and ranks),
// routable or not, sorted by key.
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
// address's metrics. When the adapters named in m.LoRA differ from the previous
// snapshot's, they are recorded for the join (see Cache), which may republish the pod;
// for that, calls for one pod SHOULD NOT overlap (the Scraper scrapes each pod once at a
// time), or the recorded adapters may lag the stored snapshot.
func (c *Cache) SetMetrics(scraped *Pod, m endpoint.Metrics) bool {
	p, ok := c.Pod(scraped.Key)
	if !ok || p.state != scraped.state || p.gen != scraped.gen {
		return false
	}
	old, ok := p.state.store(scraped.gen, &m)
	if !ok {
		return false
	}
	var before endpoint.LoRAState
	if old != nil {
		before = old.LoRA
	}
	if !slices.Equal(before.Running, m.LoRA.Running) || !slices.Equal(before.Waiting, m.LoRA.Waiting) {
		if names := loraNames(m.LoRA); !slices.Equal(loraNames(before), names) {
			c.setLoRASeen(scraped, names)
		}
	}
	return true
}

// loraNames returns the sorted, distinct adapters running or waiting in s.
func loraNames(s endpoint.LoRAState) []string {
	if len(s.Running)+len(s.Waiting) == 0 {
		return nil
	}
	names := slices.Concat(s.Running, s.Waiting)
	slices.Sort(names)
	return slices.Compact(names)
}

// setLoRASeen records names as the adapters lora_requests_info reports for scraped's
// pod, provided its metrics were not reset meanwhile.
func (c *Cache) setLoRASeen(scraped *Pod, names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, ok := c.pods[scraped.Key]
	if !ok || rec.state != scraped.state || rec.gen != scraped.gen {
		return
	}
	rec.loraSeen = names
	c.republishIfChanged(scraped.Key, rec)
}

// SetModelListing records models, the GET /v1/models listing of listed's engine requested
// at requestedAt, as the latest listing of the pod, provided the pod is still in the
// engine session listed (same address and port, routable throughout). It reports whether
// the listing was recorded. The pod is republished only if its served adapters change.
func (c *Cache) SetModelListing(listed *Pod, requestedAt time.Time, models []ListedModel) bool {
	l := &modelListing{requestedAt: requestedAt, models: slices.Clone(models)}
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, ok := c.pods[listed.Key]
	if !ok || rec.session != listed.session {
		return false
	}
	if rec.listing != nil && requestedAt.Before(rec.listing.requestedAt) {
		return false // an older listing than the one recorded
	}
	rec.listing = l
	c.republishIfChanged(listed.Key, rec)
	return true
}

// ForgetModelListing drops the recorded listing of listed's pod, provided the pod is
// still in the engine session listed, so that ModelAdapter placement decides again; the
// Scraper calls it when an engine refuses to be listed.
func (c *Cache) ForgetModelListing(listed *Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, ok := c.pods[listed.Key]
	if !ok || rec.session != listed.session || rec.listing == nil {
		return
	}
	rec.listing = nil
	c.republishIfChanged(listed.Key, rec)
}

// republishIfChanged publishes pod k if its served adapters differ from the published
// ones. The caller holds c.mu.
func (c *Cache) republishIfChanged(k endpoint.Key, rec *podRecord) {
	if rec.published == nil || !slices.Equal(c.servedAdapters(k, rec), rec.published.Adapters) {
		c.publishPod(k)
	}
}

// UpsertPod adds or replaces the pod e.Key (a pod's own key, Port 0) and its ranks.
// e.Adapters is ignored: adapters are joined as the Cache documents. e.Labels is copied.
// Metrics are dropped when the address or port changes; the engine session ends (and its
// model listing is dropped) when the address or port changes or the pod stops being
// routable.
func (c *Cache) UpsertPod(e endpoint.Endpoint) {
	e.Labels = maps.Clone(e.Labels)
	e.Adapters = nil

	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncRanks(c.upsert(e))
}

// upsert adds or replaces the endpoint e.Key, as UpsertPod documents, and returns its
// record. The caller holds c.mu.
func (c *Cache) upsert(e endpoint.Endpoint) *podRecord {
	rec, ok := c.pods[e.Key]
	switch {
	case !ok:
		rec = &podRecord{state: c.newPodState(e.Key)}
		c.pods[e.Key] = rec
		c.newSession(rec)
	case rec.ep.Address != e.Address || rec.ep.Port != e.Port:
		rec.gen = rec.state.reset()
		rec.loraSeen = nil
		c.newSession(rec)
	case rec.ep.Routable() && !e.Routable():
		c.newSession(rec)
	}
	rec.ep = e
	c.publishPod(e.Key)
	return rec
}

// SetPool records that the InferencePool pool selects the pods of its namespace whose
// labels match selector (an empty one matches none), on each of ports, and makes or
// removes ranks to match (see Cache). selector and ports MUST NOT be modified afterwards.
func (c *Cache) SetPool(pool types.NamespacedName, selector map[string]string, ports []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pools[pool] = poolRecord{selector: selector, ports: ports}
	c.syncNamespaceRanks(pool.Namespace)
}

// DeletePool removes the InferencePool pool, if present, and the ranks only it made.
func (c *Cache) DeletePool(pool types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pools[pool]; !ok {
		return
	}
	delete(c.pools, pool)
	c.syncNamespaceRanks(pool.Namespace)
}

// syncNamespaceRanks brings the ranks of every pod of namespace ns in line with the
// pools: the pods the published snapshot lists in ns, which every writer keeps equal to
// the records, rather than a walk over every record of the cluster. The caller holds c.mu.
func (c *Cache) syncNamespaceRanks(ns string) {
	var pods []*podRecord
	for _, p := range c.snap.Load().namespaces[ns] { // syncRanks publishes new slices
		if !p.Key.IsRank() {
			pods = append(pods, c.pods[p.Key])
		}
	}
	for _, rec := range pods {
		c.syncRanks(rec)
	}
}

// syncRanks makes the ranks of the pod recorded as rec those its namespace's pools make,
// each a copy of the pod's endpoint on its port. The caller holds c.mu.
func (c *Cache) syncRanks(rec *podRecord) {
	ports := c.rankPorts(rec.ep)
	for _, port := range rec.ranks {
		if _, ok := slices.BinarySearch(ports, port); !ok {
			c.deleteRecord(rankKey(rec.ep.Key, port))
		}
	}
	for _, port := range ports {
		rank := rec.ep
		rank.Key, rank.Port = rankKey(rec.ep.Key, port), port
		if old, ok := c.pods[rank.Key]; ok && reflect.DeepEqual(old.ep, rank) {
			continue // unchanged: publishing it again would copy its models' endpoint lists
		}
		c.upsert(rank)
	}
	rec.ranks = ports
}

// rankPorts returns the sorted ports of the ranks of pod e: those of the pools of its
// namespace that select it, other than its own engine port. The caller holds c.mu.
func (c *Cache) rankPorts(e endpoint.Endpoint) []int32 {
	var ports []int32
	for k, pool := range c.pools {
		if k.Namespace != e.Key.Namespace || !matchesLabels(pool.selector, e.Labels) {
			continue
		}
		for _, port := range pool.ports {
			if port != e.Port {
				ports = append(ports, port)
			}
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// rankKey is the key of pod's rank on port.
func rankKey(pod endpoint.Key, port int32) endpoint.Key {
	pod.Port = port
	return pod
}

// newSession starts a new engine session for rec, forgetting its listing. The caller
// holds c.mu.
func (c *Cache) newSession(rec *podRecord) {
	c.sessions++
	rec.session = c.sessions
	rec.listing = nil
}

// DeletePod removes the pod with key k (a pod's own key) and its ranks, if present.
func (c *Cache) DeletePod(k endpoint.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, ok := c.pods[k]
	if !ok {
		return
	}
	for _, port := range rec.ranks {
		c.deleteRecord(rankKey(k, port))
	}
	c.deleteRecord(k)
}

// deleteRecord removes the endpoint k and publishes its removal. The caller holds c.mu.
func (c *Cache) deleteRecord(k endpoint.Key) {
	delete(c.pods, k)
	c.publishPod(k)
}

// SetAdapterInstances records that the ModelAdapter adapter, on top of baseModel, is
// loaded on the pods named in instances (in adapter's namespace), replacing any earlier
// mapping. The adapter is served, under the name adapter.Name, by those instances that
// are routable and serve baseModel, unless the engine's model listing overrides the
// record. Each instance record is timestamped when the cache first receives a status naming the
// pod; a later model listing of the pod overrides it (see Cache).
func (c *Cache) SetAdapterInstances(adapter endpoint.Key, baseModel string, instances []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	old := c.adapters[adapter]
	rec := adapterRecord{baseModel: baseModel, instances: make(map[string]time.Time, len(instances))}
	for _, name := range instances {
		if since, ok := old.instances[name]; ok && old.baseModel == baseModel {
			rec.instances[name] = since
		} else {
			rec.instances[name] = now
		}
	}
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
	next := &snapshot{version: prev.version + 1, pods: prev.pods, models: maps.Clone(prev.models), modelNames: prev.modelNames,
		namespaces: maps.Clone(prev.namespaces)}
	shard := shardOf(k)
	next.pods[shard] = maps.Clone(prev.pods[shard])
	if next.pods[shard] == nil {
		next.pods[shard] = make(podShardMap)
	}

	affected := make(map[string]struct{})
	if old, ok := prev.pod(k); ok && old.IsEngine() && old.Routable() {
		affected[old.BaseModel] = struct{}{}
		for _, a := range old.Adapters {
			affected[a] = struct{}{}
		}
	}
	delete(next.pods[shard], k)
	var p *Pod
	if rec, ok := c.pods[k]; ok {
		ep := rec.ep
		ep.Adapters = c.servedAdapters(k, rec)
		p = &Pod{Endpoint: ep, hot: rec.state.hot, state: rec.state, gen: rec.gen, session: rec.session}
		rec.published = p
		next.pods[shard][k] = p
		if p.IsEngine() && p.Routable() {
			affected[p.BaseModel] = struct{}{}
			for _, a := range p.Adapters {
				affected[a] = struct{}{}
			}
		}
	}

	nsPods := slices.DeleteFunc(slices.Clone(prev.namespaces[k.Namespace]), func(q *Pod) bool { return q.Key == k })
	if p != nil {
		nsPods = insertSorted(nsPods, p)
	}
	if len(nsPods) == 0 {
		delete(next.namespaces, k.Namespace)
	} else {
		next.namespaces[k.Namespace] = nsPods
	}

	namesChanged := false
	for name := range affected {
		var asBase, asAdapter []*Pod
		m, existed := prev.models[name]
		if existed {
			isK := func(q *Pod) bool { return q.Key == k }
			asBase = slices.DeleteFunc(slices.Clone(m.asBase), isK)
			asAdapter = slices.DeleteFunc(slices.Clone(m.asAdapter), isK)
		}
		if p != nil && p.IsEngine() && p.Routable() {
			switch {
			case p.BaseModel == name:
				asBase = insertSorted(asBase, p)
			case slices.Contains(p.Adapters, name):
				asAdapter = insertSorted(asAdapter, p)
			}
		}
		if len(asBase)+len(asAdapter) == 0 {
			delete(next.models, name)
			delete(c.modelLoads, name)
			namesChanged = namesChanged || existed
			continue
		}
		namesChanged = namesChanged || !existed
		next.models[name] = c.newModel(name, asBase, asAdapter)
	}
	if namesChanged {
		next.modelNames = slices.Sorted(maps.Keys(next.models))
	}
	c.snap.Store(next)
}

// insertSorted returns pods, sorted by key, with p inserted in order.
func insertSorted(pods []*Pod, p *Pod) []*Pod {
	i, _ := slices.BinarySearchFunc(pods, p.Key, func(q *Pod, k endpoint.Key) int { return q.Key.Compare(k) })
	return slices.Insert(pods, i, p)
}

// newModel returns the model name served by asBase as their base model and by asAdapter
// as an adapter (both sorted, not both empty), with the counters kept in c.modelLoads. A
// name some pod serves as its base model is routed to those pods only. The caller holds
// c.mu.
func (c *Cache) newModel(name string, asBase, asAdapter []*Pod) *Model {
	m := &Model{Name: name, BaseModel: name, asBase: asBase, asAdapter: asAdapter, load: c.modelLoad(name)}
	if len(asBase) == 0 {
		m.endpoints = sortedPodSet(asAdapter)
		m.BaseModel = asAdapter[0].BaseModel
	} else {
		m.endpoints = sortedPodSet(asBase)
	}
	return m
}

// instanceClaim is one ModelAdapter instance record naming a pod.
type instanceClaim struct {
	// adapter is the ModelAdapter's name.
	adapter string
	// since is when the cache first received a status naming the pod.
	since time.Time
}

// servedAdapters returns the sorted adapters endpoint k, recorded as rec, serves by the
// join rule documented on Cache; ModelAdapter placement claims pods' own endpoints only.
// The caller holds c.mu.
func (c *Cache) servedAdapters(k endpoint.Key, rec *podRecord) []string {
	base := rec.ep.BaseModel
	if base == "" {
		return nil
	}
	if k.IsRank() {
		return c.join(k.Namespace, rec, nil)
	}
	var claims []instanceClaim
	for ak, a := range c.adapters {
		if ak.Namespace == k.Namespace && a.baseModel == base {
			if since, ok := a.instances[k.Name]; ok {
				claims = append(claims, instanceClaim{adapter: ak.Name, since: since})
			}
		}
	}
	return c.join(k.Namespace, rec, claims)
}

// join applies the join rule documented on Cache to rec, whose pod is in namespace ns and
// is named by the ModelAdapter instance records claims (all on its base model), and
// returns the sorted adapters served. The caller holds c.mu.
func (c *Cache) join(ns string, rec *podRecord, claims []instanceClaim) []string {
	base := rec.ep.BaseModel
	var names []string
	if rec.listing != nil {
		names = rec.listing.adapters(base)
	} else {
		for _, name := range rec.loraSeen {
			if a, ok := c.adapters[endpoint.Key{Namespace: ns, Name: name}]; ok && a.baseModel == base {
				names = append(names, name)
			}
		}
	}
	for _, cl := range claims {
		if rec.listing == nil || rec.listing.requestedAt.Before(cl.since) {
			names = append(names, cl.adapter)
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { return n == base })
	slices.Sort(names)
	return slices.Compact(names)
}

// modelLoad returns the request counters of model name, creating them on first use. The
// caller holds c.mu.
func (c *Cache) modelLoad(name string) *ModelLoad {
	l, ok := c.modelLoads[name]
	if !ok {
		l = newModelLoad()
		c.modelLoads[name] = l
	}
	return l
}

// publish builds a whole new snapshot from the writer-owned records and stores it; used
// when an adapter mapping changes, which can touch many pods. The caller holds c.mu.
func (c *Cache) publish() {
	claims := make(map[endpoint.Key][]instanceClaim)
	for ak, a := range c.adapters {
		for name, since := range a.instances {
			k := endpoint.Key{Namespace: ak.Namespace, Name: name}
			if rec, ok := c.pods[k]; ok && rec.ep.BaseModel == a.baseModel {
				claims[k] = append(claims[k], instanceClaim{adapter: ak.Name, since: since})
			}
		}
	}

	type servers struct{ asBase, asAdapter []*Pod }
	models := make(map[string]*servers)
	serversOf := func(name string) *servers {
		s, ok := models[name]
		if !ok {
			s = new(servers)
			models[name] = s
		}
		return s
	}
	next := &snapshot{version: c.snap.Load().version + 1, models: make(map[string]*Model), namespaces: make(map[string][]*Pod)}
	for i := range next.pods {
		next.pods[i] = make(podShardMap, len(c.pods)/podShards)
	}
	for k, rec := range c.pods {
		var adapters []string
		if rec.ep.BaseModel != "" {
			adapters = c.join(k.Namespace, rec, claims[k])
		}
		if rec.published == nil || !slices.Equal(rec.published.Adapters, adapters) {
			ep := rec.ep
			ep.Adapters = adapters
			rec.published = &Pod{Endpoint: ep, hot: rec.state.hot, state: rec.state, gen: rec.gen, session: rec.session}
		}
		p := rec.published
		next.pods[shardOf(k)][k] = p
		next.namespaces[k.Namespace] = append(next.namespaces[k.Namespace], p)
		if !p.IsEngine() || !p.Routable() {
			continue
		}
		s := serversOf(p.BaseModel)
		s.asBase = append(s.asBase, p)
		for _, a := range p.Adapters {
			s := serversOf(a)
			s.asAdapter = append(s.asAdapter, p)
		}
	}

	for _, pods := range next.namespaces {
		slices.SortFunc(pods, comparePods)
	}
	next.modelNames = make([]string, 0, len(models))
	for name, s := range models {
		slices.SortFunc(s.asBase, comparePods)
		slices.SortFunc(s.asAdapter, comparePods)
		next.models[name] = c.newModel(name, s.asBase, s.asAdapter)
		next.modelNames = append(next.modelNames, name)
	}
	slices.Sort(next.modelNames)
	maps.DeleteFunc(c.modelLoads, func(name string, _ *ModelLoad) bool {
		_, ok := next.models[name]
		return !ok
	})
	c.snap.Store(next)
}
