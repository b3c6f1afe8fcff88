package cache

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// TestPoolRanks checks that an InferencePool makes each of its targetPorts of each pod it
// selects an endpoint of its own, other than the pod's engine port, kept in step with the
// pod; that only the pool's Service selects ranks; and that ModelAdapter placement
// claims the pod's own endpoint only.
func TestPoolRanks(t *testing.T) {
	c := New()
	member := makePod("p").IP("10.0.0.1").Build()
	member.Labels = map[string]string{"switchboard.dev/model": "llama", "app": "pool"}
	c.UpsertPod(member)
	c.UpsertPod(makePod("q").IP("10.0.0.2").Build())
	endpoints := func(model string) []string {
		var keys []string
		for _, p := range c.ListEndpoints(model) {
			keys = append(keys, p.Key.String())
		}
		return keys
	}
	check := func(what string, want ...string) {
		t.Helper()
		if got := endpoints("llama"); !slices.Equal(got, want) {
			t.Errorf("%s: llama endpoints = %v, want %v", what, got, want)
		}
	}

	key := types.NamespacedName{Namespace: "ns", Name: "pool"}
	pool := routetable.Pool{Key: key, Selector: map[string]string{"app": "pool"}, Ports: []int32{8000, 8001, 8002}}
	c.SetPool(pool.Key, pool.Selector, pool.Ports)
	check("a pool on the pod's engine port and two more", "ns/p", "ns/p:8001", "ns/p:8002", "ns/q")

	own, _ := c.Pod(member.Key)
	rank, ok := c.Pod(endpoint.Key{Namespace: "ns", Name: "p", Port: 8001})
	if !ok || rank.Address != "10.0.0.1" || rank.Port != 8001 || rank.BaseModel != "llama" || !rank.Routable() {
		t.Fatalf("rank 8001 = %+v, want a routable llama endpoint at 10.0.0.1:8001", rank)
	}
	if rank.Load() == own.Load() {
		t.Error("the rank shares the pod's load counters")
	}

	ordinary := Service{Key: types.NamespacedName{Namespace: "ns", Name: "svc"}, Selector: pool.Selector}
	poolSvc := poolService(pool)
	for _, tt := range []struct {
		p                 *Pod
		byPool, byService bool
	}{{own, true, true}, {rank, true, false}} {
		if got := poolSvc.Selects(tt.p); got != tt.byPool {
			t.Errorf("the pool's Service selects %s: %v, want %v", tt.p.Key, got, tt.byPool)
		}
		if got := ordinary.Selects(tt.p); got != tt.byService {
			t.Errorf("a Service selects %s: %v, want %v", tt.p.Key, got, tt.byService)
		}
	}
	if port, ok := poolSvc.TargetPort(pool.Port(), rank); !ok || port != 8001 {
		t.Errorf("the pool's Service sends rank 8001's traffic to port %d (%v), want 8001", port, ok)
	}

	c.SetAdapterInstances(endpoint.Key{Namespace: "ns", Name: "sql"}, "llama", []string{"p"})
	if got := endpoints("sql"); !slices.Equal(got, []string{"ns/p"}) {
		t.Errorf("ModelAdapter placed on p: sql endpoints = %v, want the pod's own only", got)
	}

	member.Address, member.Port = "10.0.0.9", 8001
	c.UpsertPod(member)
	check("the pod moved to the pool's second port", "ns/p", "ns/p:8000", "ns/p:8002", "ns/q")
	if rank, _ := c.Pod(endpoint.Key{Namespace: "ns", Name: "p", Port: 8002}); rank.Address != "10.0.0.9" {
		t.Errorf("rank 8002 is at %s after the pod moved, want 10.0.0.9", rank.Address)
	}

	c.SetPool(pool.Key, pool.Selector, []int32{8001, 8002})
	check("the pool dropped a port", "ns/p", "ns/p:8002", "ns/q")
	c.DeletePool(pool.Key)
	check("the pool is deleted", "ns/p", "ns/q")
	c.SetPool(pool.Key, pool.Selector, pool.Ports)
	c.DeletePod(member.Key)
	check("the pod is deleted", "ns/q")
	if n := len(c.ListPods()); n != 1 {
		t.Errorf("%d endpoints left after the pod's deletion, want 1", n)
	}
}
