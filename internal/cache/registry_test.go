package cache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// podBuilder builds an endpoint.Endpoint fixture that reads like a sentence.
type podBuilder struct{ ep endpoint.Endpoint }

// makePod starts a ready vLLM pod named name in namespace "ns" serving llama.
func makePod(name string) *podBuilder {
	return &podBuilder{ep: endpoint.Endpoint{
		Key:       endpoint.Key{Namespace: "ns", Name: name},
		Address:   "10.0.0.1",
		Port:      8000,
		BaseModel: "llama",
		Engine:    endpoint.EngineVLLM,
		Labels:    map[string]string{"switchboard.dev/model": "llama"},
		Ready:     true,
	}}
}

func (b *podBuilder) IP(ip string) *podBuilder { b.ep.Address = ip; return b }
func (b *podBuilder) Model(m string) *podBuilder {
	b.ep.BaseModel = m
	b.ep.Labels = map[string]string{"switchboard.dev/model": m}
	return b
}
func (b *podBuilder) Port(port int32) *podBuilder { b.ep.Port = port; return b }
func (b *podBuilder) NotReady() *podBuilder       { b.ep.Ready = false; return b }
func (b *podBuilder) Terminating() *podBuilder    { b.ep.Terminating = true; return b }
func (b *podBuilder) Build() endpoint.Endpoint    { return b.ep }

// op is one write applied to a cache in a table test.
type op func(*Cache)

func upsert(b *podBuilder) op { return func(c *Cache) { c.UpsertPod(b.Build()) } }
func del(name string) op {
	return func(c *Cache) { c.DeletePod(endpoint.Key{Namespace: "ns", Name: name}) }
}
func adapter(name, base string, instances ...string) op {
	return func(c *Cache) { c.SetAdapterInstances(endpoint.Key{Namespace: "ns", Name: name}, base, instances) }
}
func delAdapter(name string) op {
	return func(c *Cache) { c.DeleteAdapter(endpoint.Key{Namespace: "ns", Name: name}) }
}

func TestRegistryChanges(t *testing.T) {
	tests := []struct {
		name      string
		ops       []op
		want      map[string][]string // model -> pod names
		wantPods  []string            // pods known to the registry, routable or not
		wantAddrs map[string]string   // pod -> address
	}{
		{
			name:     "add",
			ops:      []op{upsert(makePod("b")), upsert(makePod("a"))},
			want:     map[string][]string{"llama": {"a", "b"}},
			wantPods: []string{"a", "b"},
		},
		{
			name:      "update IP",
			ops:       []op{upsert(makePod("a")), upsert(makePod("a").IP("10.0.0.9"))},
			want:      map[string][]string{"llama": {"a"}},
			wantPods:  []string{"a"},
			wantAddrs: map[string]string{"a": "10.0.0.9"},
		},
		{
			name:     "relabel moves the pod to another model",
			ops:      []op{upsert(makePod("a")), upsert(makePod("b")), upsert(makePod("a").Model("qwen"))},
			want:     map[string][]string{"llama": {"b"}, "qwen": {"a"}},
			wantPods: []string{"a", "b"},
		},
		{
			name:     "readiness lost removes the endpoint and its last model",
			ops:      []op{upsert(makePod("a")), upsert(makePod("a").NotReady())},
			want:     map[string][]string{},
			wantPods: []string{"a"},
		},
		{
			name:     "readiness regained",
			ops:      []op{upsert(makePod("a").NotReady()), upsert(makePod("a"))},
			want:     map[string][]string{"llama": {"a"}},
			wantPods: []string{"a"},
		},
		{
			name:     "no IP is not routable",
			ops:      []op{upsert(makePod("a").IP(""))},
			want:     map[string][]string{},
			wantPods: []string{"a"},
		},
		{
			name:     "terminating",
			ops:      []op{upsert(makePod("a")), upsert(makePod("b")), upsert(makePod("a").Terminating())},
			want:     map[string][]string{"llama": {"b"}},
			wantPods: []string{"a", "b"},
		},
		{
			name:     "delete",
			ops:      []op{upsert(makePod("a")), upsert(makePod("b")), del("a")},
			want:     map[string][]string{"llama": {"b"}},
			wantPods: []string{"b"},
		},
		{
			name: "delete unknown pod is a no-op",
			ops:  []op{upsert(makePod("a")), del("zz")},
			want: map[string][]string{"llama": {"a"}}, wantPods: []string{"a"},
		},
		{
			name:     "adapter served only by its instances",
			ops:      []op{upsert(makePod("a")), upsert(makePod("b")), upsert(makePod("c")), adapter("sql", "llama", "a", "c")},
			want:     map[string][]string{"llama": {"a", "b", "c"}, "sql": {"a", "c"}},
			wantPods: []string{"a", "b", "c"},
		},
		{
			name:     "adapter instances changed removes stale mappings",
			ops:      []op{upsert(makePod("a")), upsert(makePod("b")), adapter("sql", "llama", "a"), adapter("sql", "llama", "b")},
			want:     map[string][]string{"llama": {"a", "b"}, "sql": {"b"}},
			wantPods: []string{"a", "b"},
		},
		{
			name:     "adapter instances emptied removes the adapter model",
			ops:      []op{upsert(makePod("a")), adapter("sql", "llama", "a"), adapter("sql", "llama")},
			want:     map[string][]string{"llama": {"a"}},
			wantPods: []string{"a"},
		},
		{
			name:     "adapter deleted",
			ops:      []op{upsert(makePod("a")), adapter("sql", "llama", "a"), delAdapter("sql")},
			want:     map[string][]string{"llama": {"a"}},
			wantPods: []string{"a"},
		},
		{
			name:     "adapter instance on another base model is ignored",
			ops:      []op{upsert(makePod("a").Model("qwen")), adapter("sql", "llama", "a")},
			want:     map[string][]string{"qwen": {"a"}},
			wantPods: []string{"a"},
		},
		{
			name:     "adapter before its pods",
			ops:      []op{adapter("sql", "llama", "a"), upsert(makePod("a"))},
			want:     map[string][]string{"llama": {"a"}, "sql": {"a"}},
			wantPods: []string{"a"},
		},
		{
			name:     "adapter disappears with its last endpoint",
			ops:      []op{upsert(makePod("a")), upsert(makePod("b")), adapter("sql", "llama", "a"), upsert(makePod("a").NotReady()), del("b")},
			want:     map[string][]string{},
			wantPods: []string{"a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New()
			for _, o := range tt.ops {
				o(c)
			}
			checkModels(t, c, tt.want)
			var gotPods []string
			for _, shard := range c.snap.Load().pods {
				for k := range shard {
					gotPods = append(gotPods, k.Name)
				}
			}
			slices.Sort(gotPods)
			if !slices.Equal(gotPods, tt.wantPods) {
				t.Errorf("pods = %v, want %v", gotPods, tt.wantPods)
			}
			for name, addr := range tt.wantAddrs {
				p, ok := c.Pod(endpoint.Key{Namespace: "ns", Name: name})
				if !ok || p.Address != addr {
					t.Errorf("Pod(%q) address = %q, want %q", name, p.Address, addr)
				}
			}
		})
	}
}

func TestPodAdaptersAndModelBase(t *testing.T) {
	c := New()
	c.UpsertPod(makePod("a").Build())
	c.SetAdapterInstances(endpoint.Key{Namespace: "ns", Name: "sql"}, "llama", []string{"a"})
	c.SetAdapterInstances(endpoint.Key{Namespace: "ns", Name: "chat"}, "llama", []string{"a"})
	p, _ := c.Pod(endpoint.Key{Namespace: "ns", Name: "a"})
	if want := []string{"chat", "sql"}; !slices.Equal(p.Adapters, want) {
		t.Errorf("Adapters = %v, want %v", p.Adapters, want)
	}
	m, ok := c.Model("sql")
	if !ok || !m.IsAdapter() || m.BaseModel != "llama" {
		t.Errorf("Model(sql) = %+v, %v; want adapter of llama", m, ok)
	}
	if base, _ := c.Model("llama"); base.IsAdapter() {
		t.Error("base model reported as adapter")
	}
}

func TestReadersKeepTheirSnapshot(t *testing.T) {
	c := New()
	labels := map[string]string{"x": "1"}
	e := makePod("a").Build()
	e.Labels = labels
	c.UpsertPod(e)
	labels["x"] = "mutated by caller"

	before := c.ListEndpoints("llama")
	old, _ := c.Pod(endpoint.Key{Namespace: "ns", Name: "a"})
	before[0] = nil // a reader scribbling on its slice affects nobody else
	c.UpsertPod(makePod("b").Build())
	c.DeletePod(endpoint.Key{Namespace: "ns", Name: "a"})

	if old.Labels["x"] != "1" {
		t.Errorf("published labels changed to %q", old.Labels["x"])
	}
	if got := podNames(c.Reader, "llama"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("ListEndpoints = %v, want [b]", got)
	}
}

// TestVersionGrowsWithPodsNotMetrics checks that Version changes with every write that
// publishes pods or models, whichever path publishes it, and not with metrics alone.
func TestVersionGrowsWithPodsNotMetrics(t *testing.T) {
	c := New()
	v := c.Version()
	for i, write := range []op{
		upsert(makePod("a")),
		upsert(makePod("b")),
		upsert(makePod("a").NotReady()),
		adapter("lora", "llama", "b"),
		del("a"),
	} {
		write(c)
		if next := c.Version(); next <= v {
			t.Fatalf("write %d: Version() = %d, want more than %d", i, next, v)
		}
		v = c.Version()
	}
	p, _ := c.Pod(endpoint.Key{Namespace: "ns", Name: "b"})
	c.SetMetrics(p, endpoint.Metrics{Running: 1})
	if c.Version() != v {
		t.Errorf("SetMetrics changed Version() from %d to %d", v, c.Version())
	}
}

func TestSetMetrics(t *testing.T) {
	c := New()
	k := endpoint.Key{Namespace: "ns", Name: "a"}
	c.UpsertPod(makePod("a").Build())
	scraped, _ := c.Pod(k)
	if !c.SetMetrics(scraped, endpoint.Metrics{Running: 3}) {
		t.Fatal("SetMetrics on the current pod not stored")
	}
	p, _ := c.Pod(k)
	if got := p.Metrics(); got == nil || got.Running != 3 {
		t.Fatalf("Metrics() = %+v, want Running 3", got)
	}

	c.UpsertPod(makePod("a").NotReady().Build())
	if p, _ := c.Pod(k); p.Metrics() == nil {
		t.Error("metrics dropped on a readiness flip")
	}
	if !c.SetMetrics(scraped, endpoint.Metrics{Running: 4}) {
		t.Error("a scrape of the same address discarded after a readiness flip")
	}

	moves := []struct {
		name string
		pod  *podBuilder
	}{
		{"IP change", makePod("a").IP("10.0.0.2")},
		{"port change", makePod("a").IP("10.0.0.2").Port(9000)},
	}
	for _, move := range moves {
		before, _ := c.Pod(k)
		c.UpsertPod(move.pod.Build())
		if p, _ := c.Pod(k); p.Metrics() != nil || p.Hot().ScrapedAt() != 0 || p.Hot().Queue() != (endpoint.Queue{}) {
			t.Errorf("%s: metrics kept (queue %+v)", move.name, p.Hot().Queue())
		}
		if c.SetMetrics(before, endpoint.Metrics{Running: 9, ScrapedAt: time.Now()}) {
			t.Errorf("%s: a scrape of the old address stored", move.name)
		}
		if p, _ := c.Pod(k); p.Hot().Queue().Running != 0 {
			t.Errorf("%s: a scrape of the old address reached the summary", move.name)
		}
	}

	c.DeletePod(k)
	if c.SetMetrics(scraped, endpoint.Metrics{}) {
		t.Error("SetMetrics for a deleted pod stored")
	}
}

// describe renders a snapshot's models and pods as comparable strings.
func describe(s *snapshot) []string {
	var out []string
	for name, m := range s.models {
		line := name + " base=" + m.BaseModel + ":"
		for _, p := range m.endpoints.Pods {
			line += " " + p.Key.String()
		}
		out = append(out, line)
	}
	for i, shard := range s.pods {
		for k, p := range shard {
			if shardOf(k) != i {
				out = append(out, "misplaced "+k.String())
			}
			out = append(out, fmt.Sprintf("pod %s %s %s ready=%v term=%v adapters=%v", k, p.Address, p.BaseModel, p.Ready, p.Terminating, p.Adapters))
		}
	}
	slices.Sort(out)
	return append(out, fmt.Sprint(s.modelNames))
}

func TestIncrementalPublishMatchesRebuild(t *testing.T) {
	c := New()
	r := rand.New(rand.NewPCG(11, 12))
	for step := range 3000 {
		i := r.IntN(40)
		name := "p" + strconv.Itoa(i)
		model := "m" + strconv.Itoa(r.IntN(4))
		switch r.IntN(13) {
		case 10: // a listing, some of whose adapters have another parent
			if p, ok := c.Pod(endpoint.Key{Namespace: "ns", Name: name}); ok {
				models := []ListedModel{{ID: p.BaseModel}}
				for range r.IntN(3) {
					parent := p.BaseModel
					if r.IntN(3) == 0 {
						parent = "m" + strconv.Itoa(r.IntN(4))
					}
					models = append(models, ListedModel{ID: "lora" + strconv.Itoa(r.IntN(6)), Parent: parent})
				}
				if r.IntN(10) == 0 { // an adapter named like a base model
					models = append(models, ListedModel{ID: "m" + strconv.Itoa(r.IntN(4)), Parent: p.BaseModel})
				}
				c.SetModelListing(p, time.Now().Add(time.Duration(r.IntN(3)-1)*time.Millisecond), models)
			}
		case 11:
			if p, ok := c.Pod(endpoint.Key{Namespace: "ns", Name: name}); ok {
				c.ForgetModelListing(p)
			}
		case 12:
			if p, ok := c.Pod(endpoint.Key{Namespace: "ns", Name: name}); ok {
				c.SetMetrics(p, endpoint.Metrics{LoRA: endpoint.LoRAState{Running: []string{"lora" + strconv.Itoa(r.IntN(6))}}})
			}
		case 0:
			c.DeletePod(endpoint.Key{Namespace: "ns", Name: name})
		case 1:
			a := endpoint.Key{Namespace: "ns", Name: "lora" + strconv.Itoa(r.IntN(4))}
			instances := []string{"p" + strconv.Itoa(r.IntN(40)), "p" + strconv.Itoa(r.IntN(40))}
			c.SetAdapterInstances(a, model, instances)
		case 2:
			c.DeleteAdapter(endpoint.Key{Namespace: "ns", Name: "lora" + strconv.Itoa(r.IntN(4))})
		default:
			b := makePod(name).Model(model).IP("10.0.0." + strconv.Itoa(r.IntN(3)))
			if r.IntN(4) == 0 {
				b.NotReady()
			}
			if r.IntN(8) == 0 {
				b.Terminating()
			}
			c.UpsertPod(b.Build())
		}
		got := describe(c.snap.Load())
		c.mu.Lock()
		c.publish()
		c.mu.Unlock()
		if want := describe(c.snap.Load()); !slices.Equal(got, want) {
			t.Fatalf("step %d: incremental snapshot\n%v\nfull rebuild\n%v", step, got, want)
		}
		if len(c.modelLoads) != len(c.snap.Load().models) {
			t.Fatalf("step %d: %d model counters for %d models", step, len(c.modelLoads), len(c.snap.Load().models))
		}
	}
}

// checkModels checks that c serves exactly the models of want, each on the pods named.
func checkModels(t *testing.T, c *Cache, want map[string][]string) {
	t.Helper()
	var wantModels []string
	for m, pods := range want {
		wantModels = append(wantModels, m)
		if got := podNames(c.Reader, m); !slices.Equal(got, pods) {
			t.Errorf("ListEndpoints(%q) = %v, want %v", m, got, pods)
		}
	}
	slices.Sort(wantModels)
	if got := c.Models(); !slices.Equal(got, wantModels) {
		t.Errorf("Models() = %v, want %v", got, wantModels)
	}
}
