package cache

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// listed returns the /v1/models listing of a llama engine holding adapters, each an
// adapter of llama.
func listed(adapters ...string) []ListedModel {
	models := []ListedModel{{ID: "llama", Root: "/models/llama"}}
	for _, a := range adapters {
		models = append(models, ListedModel{ID: a, Parent: "llama", Root: "/adapters/" + a})
	}
	return models
}

// listing records models as pod name's listing requested at the given time.
func listing(name string, requestedAt time.Time, models []ListedModel) op {
	return func(c *Cache) {
		p, ok := c.Pod(podKey(name))
		if !ok || !c.SetModelListing(p, requestedAt, models) {
			panic("listing of " + name + " not recorded")
		}
	}
}

// lora records a metrics snapshot of pod name whose lora_requests_info names running.
func lora(name string, running ...string) op {
	return func(c *Cache) {
		p, _ := c.Pod(podKey(name))
		c.SetMetrics(p, endpoint.Metrics{LoRA: endpoint.LoRAState{Running: running}, ScrapedAt: time.Now()})
	}
}

// later is a listing time after anything the test records; earlier one before.
var (
	later   = time.Now().Add(time.Hour)
	earlier = time.Now().Add(-time.Hour)
)

func TestJoinRules(t *testing.T) {
	tests := []struct {
		name string
		ops  []op
		want map[string][]string // model -> pod names
		// wantBase maps adapter models to their base model.
		wantBase map[string]string
	}{
		{
			name:     "listing only: an adapter the engine lists is served without a ModelAdapter",
			ops:      []op{upsert(makePod("a")), upsert(makePod("b")), listing("a", later, listed("sql"))},
			want:     map[string][]string{"llama": {"a", "b"}, "sql": {"a"}},
			wantBase: map[string]string{"sql": "llama"},
		},
		{
			name: "ModelAdapter only: placement decides before the first listing",
			ops:  []op{upsert(makePod("a")), upsert(makePod("b")), adapter("sql", "llama", "a")},
			want: map[string][]string{"llama": {"a", "b"}, "sql": {"a"}},
		},
		{
			name: "both agree",
			ops:  []op{upsert(makePod("a")), adapter("sql", "llama", "a"), listing("a", later, listed("sql"))},
			want: map[string][]string{"llama": {"a"}, "sql": {"a"}},
		},
		{
			name: "a listing newer than the instance record wins: not served there",
			ops:  []op{upsert(makePod("a")), upsert(makePod("b")), adapter("sql", "llama", "a", "b"), listing("a", later, listed())},
			want: map[string][]string{"llama": {"a", "b"}, "sql": {"b"}},
		},
		{
			name: "an instance record newer than the listing is trusted until the next listing",
			ops:  []op{upsert(makePod("a")), listing("a", earlier, listed()), adapter("sql", "llama", "a")},
			want: map[string][]string{"llama": {"a"}, "sql": {"a"}},
		},
		{
			name: "the next listing refutes a newer instance record",
			ops: []op{upsert(makePod("a")), listing("a", earlier, listed()), adapter("sql", "llama", "a"),
				listing("a", later, listed())},
			want: map[string][]string{"llama": {"a"}},
		},
		{
			name: "an unchanged status keeps its instance record's time",
			ops: []op{upsert(makePod("a")), upsert(makePod("b")), adapter("sql", "llama", "a"), listing("a", later, listed()),
				adapter("sql", "llama", "a", "b")},
			want: map[string][]string{"llama": {"a", "b"}, "sql": {"b"}},
		},
		{
			name: "listing drops an adapter",
			ops: []op{upsert(makePod("a")), listing("a", earlier, listed("sql", "chat")),
				listing("a", later, listed("chat"))},
			want: map[string][]string{"llama": {"a"}, "chat": {"a"}},
		},
		{
			name: "an adapter of another base model is ignored",
			ops: []op{upsert(makePod("a")), listing("a", later, []ListedModel{
				{ID: "llama"}, {ID: "sql", Parent: "qwen"}, {ID: "qwen"}, {ID: "chat", Parent: "llama"},
			})},
			want: map[string][]string{"llama": {"a"}, "chat": {"a"}},
		},
		{
			name: "an adapter whose parent is the root of the base entry is accepted",
			ops: []op{upsert(makePod("a")), listing("a", later, []ListedModel{
				{ID: "llama", Root: "/models/llama"}, {ID: "sql", Parent: "/models/llama"},
			})},
			want: map[string][]string{"llama": {"a"}, "sql": {"a"}},
		},
		{
			name: "a parent equal to the root of a base entry for another model is ignored",
			ops: []op{upsert(makePod("a")), listing("a", later, []ListedModel{
				{ID: "qwen", Root: "/models/qwen"}, {ID: "sql", Parent: "/models/qwen"},
			})},
			want: map[string][]string{"llama": {"a"}},
		},
		{
			name: "a listing cannot move a pod to another base",
			ops:  []op{upsert(makePod("a").Model("qwen")), listing("a", later, listed("sql"))},
			want: map[string][]string{"qwen": {"a"}},
		},
		{
			name: "a relabelled pod drops the adapters of its old base",
			ops:  []op{upsert(makePod("a")), listing("a", later, listed("sql")), upsert(makePod("a").Model("qwen"))},
			want: map[string][]string{"qwen": {"a"}},
		},
		{
			name: "a listed adapter named like a served base model is not routed there",
			ops: []op{upsert(makePod("a")), upsert(makePod("q").Model("qwen")),
				listing("a", later, []ListedModel{{ID: "llama"}, {ID: "qwen", Parent: "llama"}})},
			want:     map[string][]string{"llama": {"a"}, "qwen": {"q"}},
			wantBase: map[string]string{"qwen": "qwen"},
		},
		{
			name: "entries without a parent other than the base are ignored",
			ops:  []op{upsert(makePod("a")), listing("a", later, []ListedModel{{ID: "llama"}, {ID: "llama-alias"}})},
			want: map[string][]string{"llama": {"a"}},
		},
		{
			name: "an address change forgets the listing: placement decides again",
			ops:  []op{upsert(makePod("a")), adapter("sql", "llama", "a"), listing("a", later, listed("chat")), upsert(makePod("a").IP("10.0.0.2"))},
			want: map[string][]string{"llama": {"a"}, "sql": {"a"}},
		},
		{
			name: "a pod that stops being routable forgets its listing",
			ops: []op{upsert(makePod("a")), listing("a", later, listed("chat")), upsert(makePod("a").NotReady()),
				upsert(makePod("a"))},
			want: map[string][]string{"llama": {"a"}},
		},
		{
			name: "ForgetModelListing falls back to placement",
			ops: []op{upsert(makePod("a")), adapter("sql", "llama", "a"), listing("a", later, listed("chat")),
				func(c *Cache) { p, _ := c.Pod(podKey("a")); c.ForgetModelListing(p) }},
			want: map[string][]string{"llama": {"a"}, "sql": {"a"}},
		},
		{
			name: "lora_requests_info confirms a declared adapter before the first listing",
			ops:  []op{upsert(makePod("a")), upsert(makePod("b")), adapter("sql", "llama", "b"), lora("a", "sql", "other")},
			want: map[string][]string{"llama": {"a", "b"}, "sql": {"a", "b"}},
		},
		{
			name: "lora_requests_info of an adapter declared on another base is ignored",
			ops:  []op{upsert(makePod("a")), adapter("sql", "qwen"), lora("a", "sql")},
			want: map[string][]string{"llama": {"a"}},
		},
		{
			name: "lora_requests_info yields to a listing",
			ops:  []op{upsert(makePod("a")), adapter("sql", "llama"), lora("a", "sql"), listing("a", later, listed())},
			want: map[string][]string{"llama": {"a"}},
		},
		{
			name: "lora_requests_info that stops naming an adapter",
			ops:  []op{upsert(makePod("a")), adapter("sql", "llama"), lora("a", "sql"), lora("a")},
			want: map[string][]string{"llama": {"a"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New()
			for _, o := range tt.ops {
				o(c)
			}
			checkModels(t, c, tt.want)
			for m, base := range tt.wantBase {
				if got, ok := c.Model(m); !ok || got.BaseModel != base {
					t.Errorf("Model(%q).BaseModel = %q, want %q", m, got.BaseModel, base)
				}
			}
		})
	}
}

func TestModelListingIsScopedToTheSession(t *testing.T) {
	c := New()
	c.UpsertPod(makePod("a").Build())
	before, _ := c.Pod(podKey("a"))

	// A readiness flip ends the session: a listing requested before it is discarded.
	c.UpsertPod(makePod("a").NotReady().Build())
	c.UpsertPod(makePod("a").Build())
	if c.SetModelListing(before, later, listed("sql")) {
		t.Error("a listing of an earlier session was recorded")
	}
	// So does a move.
	now, _ := c.Pod(podKey("a"))
	c.UpsertPod(makePod("a").IP("10.0.0.2").Build())
	if c.SetModelListing(now, later, listed("sql")) {
		t.Error("a listing of the old address was recorded")
	}
	// A label change does not.
	now, _ = c.Pod(podKey("a"))
	c.UpsertPod(makePod("a").IP("10.0.0.2").Build())
	if !c.SetModelListing(now, later, listed("sql")) {
		t.Error("a listing of the current session was discarded")
	}
	if c.SetModelListing(now, earlier, listed()) {
		t.Error("a listing older than the recorded one was recorded")
	}
	if got := podNames(c.Reader, "sql"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("ListEndpoints(sql) = %v, want [a]", got)
	}
	c.DeletePod(podKey("a"))
	if c.SetModelListing(now, later, listed()) {
		t.Error("a listing of a deleted pod was recorded")
	}
}

func TestModelListingRepublishesOnlyItsPod(t *testing.T) {
	c := New()
	for _, name := range []string{"a", "b", "c"} {
		c.UpsertPod(makePod(name).Build())
	}
	b, _ := c.Pod(podKey("b"))
	a, _ := c.Pod(podKey("a"))
	snap := c.snap.Load()

	// An unchanged served set publishes nothing.
	if !c.SetModelListing(a, time.Now(), listed()) {
		t.Fatal("listing not recorded")
	}
	if c.snap.Load() != snap {
		t.Error("a listing that changes nothing published a snapshot")
	}

	if !c.SetModelListing(a, time.Now(), listed("sql")) {
		t.Fatal("listing not recorded")
	}
	next := c.snap.Load()
	if next == snap {
		t.Fatal("a listing that adds an adapter published nothing")
	}
	if got, _ := c.Pod(podKey("b")); got != b {
		t.Error("pod b was republished by pod a's listing")
	}
	if got, _ := c.Pod(podKey("a")); got == a || !slices.Equal(got.Adapters, []string{"sql"}) {
		t.Errorf("pod a: Adapters = %v, want a new version with [sql]", got.Adapters)
	}
	for i := range next.pods {
		if i != shardOf(podKey("a")) && reflect.ValueOf(next.pods[i]).UnsafePointer() != reflect.ValueOf(snap.pods[i]).UnsafePointer() {
			t.Errorf("shard %d was copied by pod a's listing", i)
		}
	}
}
