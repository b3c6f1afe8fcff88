package modeladapter

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/engineclient"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

// root returns the root (the load path) the engine reports for adapter, "" when it does
// not list it.
func (e *engine) root(t *testing.T, adapter string) string {
	t.Helper()
	cards, err := engineclient.New(nil).ModelCards(context.Background(), "http://"+e.addr, e.Config().APIKey)
	if err != nil {
		t.Fatalf("list models of %s: %v", e.addr, err)
	}
	for _, m := range cards {
		if m.ID == adapter {
			return m.Root
		}
	}
	return ""
}

// hangingLoads makes every adapter load of an engine take an hour, or until the client
// gives up.
func hangingLoads(c *enginesim.Config) { c.LoRALoadTime = time.Hour }

// artifacts returns status.artifacts of ma as pod → artifact.
func artifacts(ma *v1alpha1.ModelAdapter) map[string]string {
	out := map[string]string{}
	for _, a := range ma.Status.Artifacts {
		out[a.Pod] = a.ArtifactURL
	}
	return out
}

func TestArtifactChangeReloads(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "ma-artifact")
	e1, e2 := startEngineOn(t, "127.0.0.81", "llama", nil), startEngineOn(t, "127.0.0.82", "llama", nil)
	newEnginePod(t, c, ns, "p1", e1, nil)
	newEnginePod(t, c, ns, "p2", e2, nil)
	runManager(t, c, e1, e2)

	c.Create(t, adapter(ns, "sql", "llama", nil, nil))
	ma := waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1", "p2")
	v1 := ma.Spec.ArtifactURL
	if got := artifacts(ma); got["p1"] != v1 || got["p2"] != v1 || len(got) != 2 {
		t.Fatalf("status.artifacts = %v, want p1 and p2 at %s", got, v1)
	}

	const v2 = "s3://adapters/sql-v2"
	patch := client.MergeFrom(ma.DeepCopy())
	ma.Spec.ArtifactURL = v2
	if err := c.Patch(ctx, ma, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both pods are recorded with the new artifact", func() bool {
		ma = get(t, c, ns, "sql")
		got := artifacts(ma)
		return ma.Status.ObservedGeneration == ma.Generation && got["p1"] == v2 && got["p2"] == v2
	})
	if reason, _ := readyReason(ma); reason != v1alpha1.ModelAdapterReasonLoaded || !slices.Equal(ma.Status.Instances, []string{"p1", "p2"}) {
		t.Errorf("Ready reason %s on %v, want Loaded on [p1 p2]", reason, ma.Status.Instances)
	}
	if r1, r2 := e1.root(t, "sql"), e2.root(t, "sql"); r1 != v2 || r2 != v2 {
		t.Fatalf("engines load the adapter from %q and %q, want %q", r1, r2, v2)
	}
	if e1.loads.Load() != 2 || e2.loads.Load() != 2 {
		t.Errorf("loads = %d, %d; want 2, 2 (one per artifact)", e1.loads.Load(), e2.loads.Load())
	}
}

func TestHungEngineDoesNotStallOtherAdapters(t *testing.T) {
	c := startCluster(t)
	ns := newNamespace(t, c, "ma-hung")
	hung := startEngineOn(t, "127.0.0.83", "llama", hangingLoads)
	fine := startEngineOn(t, "127.0.0.84", "llama", nil)
	newEnginePod(t, c, ns, "slow", hung, map[string]string{"app": "slow"})
	newEnginePod(t, c, ns, "fast", fine, map[string]string{"app": "fast"})
	// Loads may take as long as the hung one does: only concurrent reconciles let the
	// other adapter through.
	runManagerWith(t, c, func(r *Reconciler) { r.LoadTimeout = time.Hour }, hung)

	c.Create(t, adapter(ns, "stuck", "llama", map[string]string{"app": "slow"}, nil))
	waitFor(t, "the hung engine received the load", func() bool { return hung.loads.Load() > 0 })
	c.Create(t, adapter(ns, "sql", "llama", map[string]string{"app": "fast"}, nil))
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "fast")
	if hung.holds(t, "stuck") || hung.loads.Load() != 1 {
		t.Fatalf("the hung engine holds the adapter or saw %d loads, want its one load still pending", hung.loads.Load())
	}
}

func TestLoadTimeoutFailsTheHungLoad(t *testing.T) {
	c := startCluster(t)
	ns := newNamespace(t, c, "ma-timeout")
	hung := startEngineOn(t, "127.0.0.85", "llama", hangingLoads)
	newEnginePod(t, c, ns, "p1", hung, nil)
	runManagerWith(t, c, func(r *Reconciler) { r.LoadTimeout = 200 * time.Millisecond }, hung)

	c.Create(t, adapter(ns, "sql", "llama", nil, nil))
	ma := waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoadFailed)
	cond := meta.FindStatusCondition(ma.Status.Conditions, v1alpha1.ModelAdapterConditionReady)
	if !strings.Contains(cond.Message, "pod p1") || !strings.Contains(cond.Message, context.DeadlineExceeded.Error()) {
		t.Errorf("Ready message = %q, want the timed-out load on pod p1", cond.Message)
	}
	waitFor(t, "the failed load is retried", func() bool { return hung.loads.Load() >= 2 })
}

func TestDeleteUnloadsFromEngineBackAfterOutage(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "ma-outage")
	e1, e2 := startEngineOn(t, "127.0.0.86", "llama", nil), startEngineOn(t, "127.0.0.87", "llama", nil)
	newEnginePod(t, c, ns, "p1", e1, nil)
	newEnginePod(t, c, ns, "p2", e2, nil)
	runManager(t, c, e2)
	ma := adapter(ns, "sql", "llama", nil, nil)
	c.Create(t, ma)
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1", "p2")

	e1.stop()
	// p1 no longer serves the adapter as far as anyone can tell, but is remembered.
	ma = waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoadFailed, "p2")
	if got := artifacts(ma); got["p1"] != ma.Spec.ArtifactURL {
		t.Fatalf("status.artifacts = %v, want p1 still recorded", got)
	}

	if err := c.Delete(ctx, ma); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reachable engine unloaded the adapter", func() bool { return !e2.holds(t, "sql") })
	// Further passes of the finalizer (each lists p2's engine) keep the adapter.
	n := e2.lists.Load()
	waitFor(t, "two more finalizer passes", func() bool { return e2.lists.Load() >= n+2 })
	if get(t, c, ns, "sql") == nil {
		t.Fatal("the ModelAdapter is gone while p1's engine may still hold it")
	}

	e1.restart(t)
	waitFor(t, "the ModelAdapter is gone (finalizer removed)", func() bool { return get(t, c, ns, "sql") == nil })
	if e1.holds(t, "sql") {
		t.Fatal("the engine back from its outage still holds the deleted adapter")
	}
}

// staleReads is a client whose next ModelAdapter read, once armed, returns the object
// given, as an informer that has not seen the latest write yet does.
type staleReads struct {
	client.Client
	next   atomic.Pointer[v1alpha1.ModelAdapter]
	served atomic.Bool
}

// Get returns the armed stale ModelAdapter once, then reads through.
func (s *staleReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if ma, ok := obj.(*v1alpha1.ModelAdapter); ok {
		if stale := s.next.Swap(nil); stale != nil {
			stale.DeepCopyInto(ma)
			s.served.Store(true)
			return nil
		}
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

func TestStaleReadDoesNotForgetUnreachableCopy(t *testing.T) {
	c := startCluster(t)
	ns := newNamespace(t, c, "ma-stale-read")
	e1, e2 := startEngineOn(t, "127.0.0.89", "llama", nil), startEngineOn(t, "127.0.0.90", "llama", nil)
	newEnginePod(t, c, ns, "p1", e1, nil)
	newEnginePod(t, c, ns, "p2", e2, nil)
	reads := new(staleReads)
	runManagerWith(t, c, func(r *Reconciler) { reads.Client = r.Client; r.Client = reads }, e2)
	created := adapter(ns, "sql", "llama", nil, nil)
	c.Create(t, created)
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1", "p2")
	e1.stop()
	ma := waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoadFailed, "p2")

	// A read as of the version before any load was confirmed: its status is empty.
	stale := ma.DeepCopy()
	stale.ResourceVersion = created.ResourceVersion
	stale.Status = v1alpha1.ModelAdapterStatus{}
	reads.next.Store(stale)
	waitFor(t, "a pass read the stale version", reads.served.Load)
	n := e2.lists.Load()
	waitFor(t, "two more passes", func() bool { return e2.lists.Load() >= n+2 })
	if got := artifacts(get(t, c, ns, "sql")); got["p1"] != ma.Spec.ArtifactURL {
		t.Fatalf("status.artifacts = %v, want p1 (unreachable, may still hold the adapter) recorded", got)
	}
}

// laggingView is a pod view that, once frozen, keeps answering with the pods it was given,
// as a metadata cache behind the API server does; it counts the listings.
type laggingView struct {
	PodReader
	frozen atomic.Pointer[[]*cache.Pod]
	lists  atomic.Int64
}

// ListPods returns the frozen pods, or the live ones when not frozen.
func (v *laggingView) ListPods() []*cache.Pod {
	v.lists.Add(1)
	if pods := v.frozen.Load(); pods != nil {
		return *pods
	}
	return v.PodReader.ListPods()
}

func TestStalePodViewDoesNotUnload(t *testing.T) {
	c := startCluster(t)
	ns := newNamespace(t, c, "ma-stale")
	e := startEngineOn(t, "127.0.0.88", "llama", nil)
	newEnginePod(t, c, ns, "p1", e, nil)
	view := new(laggingView)
	runManagerWith(t, c, func(r *Reconciler) { view.PodReader = r.Pods; r.Pods = view })
	c.Create(t, adapter(ns, "sql", "llama", nil, nil))
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1")

	// The view shows p1 as it was long ago, not ready; the API server shows it ready.
	var old []*cache.Pod
	for _, p := range view.PodReader.ListPods() {
		stale := *p
		stale.Ready = false
		old = append(old, &stale)
	}
	view.frozen.Store(&old)
	lists := view.lists.Load()
	waitFor(t, "several reconciles read the stale view", func() bool { return view.lists.Load() >= lists+10 })
	if !e.holds(t, "sql") {
		t.Fatal("the adapter was unloaded from a ready pod on a stale view")
	}
	if ma := get(t, c, ns, "sql"); !slices.Equal(ma.Status.Instances, []string{"p1"}) {
		t.Errorf("instances = %v, want [p1]", ma.Status.Instances)
	}

	// Once the view catches up the controller acts again: a pod really gone unready loses
	// the adapter.
	view.frozen.Store(nil)
	pod := &corev1.Pod{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "p1"}, pod); err != nil {
		t.Fatal(err)
	}
	c.SetPodReady(t, pod, pod.Status.PodIP, false)
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonNoCandidatePods)
	waitFor(t, "the adapter is unloaded from the unready pod", func() bool { return !e.holds(t, "sql") })
}
