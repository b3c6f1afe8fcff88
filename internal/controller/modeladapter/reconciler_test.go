package modeladapter

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/engineclient"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

func TestPlacesOnAllCandidatesAndConverges(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "ma-all")
	e1, e2 := startEngine(t, "llama", nil), startEngine(t, "llama", nil)
	other := startEngine(t, "llama", nil)     // does not match the selector
	mistral := startEngine(t, "mistral", nil) // serves another base model
	newEnginePod(t, c, ns, "p1", e1, map[string]string{"app": "a"})
	newEnginePod(t, c, ns, "p2", e2, map[string]string{"app": "a"})
	newEnginePod(t, c, ns, "p3", other, map[string]string{"app": "b"})
	newEnginePod(t, c, ns, "p4", mistral, map[string]string{"app": "a"})
	runManager(t, c)

	c.Create(t, adapter(ns, "sql", "llama", map[string]string{"app": "a"}, nil))
	ma := waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1", "p2")
	if ma.Status.DesiredReplicas != 2 || ma.Status.ReadyReplicas != 2 {
		t.Errorf("desired/ready = %d/%d, want 2/2", ma.Status.DesiredReplicas, ma.Status.ReadyReplicas)
	}
	for _, typ := range []string{v1alpha1.ModelAdapterConditionScheduled, v1alpha1.ModelAdapterConditionReady} {
		cond := meta.FindStatusCondition(ma.Status.Conditions, typ)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != ma.Generation {
			t.Errorf("condition %s = %+v, want True at generation %d", typ, cond, ma.Generation)
		}
	}
	if !controllerutil.ContainsFinalizer(ma, Finalizer) {
		t.Errorf("finalizers = %v, want %s", ma.Finalizers, Finalizer)
	}
	if !e1.holds(t, "sql") || !e2.holds(t, "sql") || other.holds(t, "sql") || mistral.holds(t, "sql") {
		t.Fatal("the adapter is not loaded exactly on the candidate engines")
	}

	t.Run("engine drift is repaired", func(t *testing.T) {
		if err := e1.UnloadAdapter("sql"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the adapter is loaded on e1 again", func() bool { return e1.holds(t, "sql") })
		waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1", "p2")
	})

	t.Run("fewer replicas unload a copy", func(t *testing.T) {
		ma := get(t, c, ns, "sql")
		patch := client.MergeFrom(ma.DeepCopy())
		ma.Spec.Replicas = ptr.To[int32](1)
		if err := c.Patch(ctx, ma, patch); err != nil {
			t.Fatal(err)
		}
		var got *v1alpha1.ModelAdapter
		waitFor(t, "one instance", func() bool {
			got = get(t, c, ns, "sql")
			reason, _ := readyReason(got)
			return reason == v1alpha1.ModelAdapterReasonLoaded && len(got.Status.Instances) == 1 &&
				got.Status.ObservedGeneration == got.Generation
		})
		if got.Status.DesiredReplicas != 1 {
			t.Errorf("desiredReplicas = %d, want 1", got.Status.DesiredReplicas)
		}
		waitFor(t, "exactly one engine holds the adapter", func() bool {
			return e1.holds(t, "sql") != e2.holds(t, "sql")
		})
	})

	t.Run("selector change moves the adapter", func(t *testing.T) {
		ma := get(t, c, ns, "sql")
		patch := client.MergeFrom(ma.DeepCopy())
		ma.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "b"}}
		if err := c.Patch(ctx, ma, patch); err != nil {
			t.Fatal(err)
		}
		waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p3")
		waitFor(t, "only p3's engine holds the adapter", func() bool {
			return other.holds(t, "sql") && !e1.holds(t, "sql") && !e2.holds(t, "sql")
		})
	})
}

func TestLeastAdaptersPicksTheLessLoadedPod(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "ma-least")
	busy, idle := startEngine(t, "llama", nil), startEngine(t, "llama", nil)
	for _, name := range []string{"x", "y"} {
		if err := busy.LoadAdapter(ctx, name, "/"+name); err != nil {
			t.Fatal(err)
		}
	}
	// "a" sorts first, so a pick by name alone would choose the busy pod.
	newEnginePod(t, c, ns, "a", busy, nil)
	newEnginePod(t, c, ns, "b", idle, nil)
	runManager(t, c)

	ma := adapter(ns, "sql", "llama", nil, ptr.To[int32](1))
	ma.Spec.SchedulerName = v1alpha1.SchedulerLeastAdapters
	c.Create(t, ma)
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "b")
	if busy.holds(t, "sql") || !idle.holds(t, "sql") {
		t.Fatal("the adapter is not on the idle engine only")
	}
	if got := get(t, c, ns, "sql").Status; got.DesiredReplicas != 1 || got.ReadyReplicas != 1 {
		t.Errorf("desired/ready = %d/%d, want 1/1", got.DesiredReplicas, got.ReadyReplicas)
	}

	// The random scheduler places too.
	r := adapter(ns, "chat", "llama", nil, ptr.To[int32](2))
	r.Spec.SchedulerName = v1alpha1.SchedulerRandom
	c.Create(t, r)
	waitForStatus(t, c, ns, "chat", v1alpha1.ModelAdapterReasonLoaded, "a", "b")
}

func TestNoCandidatePodsThenPodAppears(t *testing.T) {
	c := startCluster(t)
	ns := newNamespace(t, c, "ma-none")
	runManager(t, c)
	c.Create(t, adapter(ns, "sql", "llama", nil, nil))
	ma := waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonNoCandidatePods)
	cond := meta.FindStatusCondition(ma.Status.Conditions, v1alpha1.ModelAdapterConditionScheduled)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ModelAdapterReasonNoCandidatePods {
		t.Fatalf("Scheduled = %+v, want False NoCandidatePods", cond)
	}

	e := startEngine(t, "llama", nil)
	newEnginePod(t, c, ns, "p1", e, nil)
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1")
	if !e.holds(t, "sql") {
		t.Fatal("engine does not hold the adapter")
	}
}

func TestMaxAdaptersThenRecovery(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "ma-max")
	full := startEngine(t, "llama", func(c *enginesim.Config) { c.MaxLoRAs = 1 })
	if err := full.LoadAdapter(ctx, "other", "/other"); err != nil {
		t.Fatal(err)
	}
	newEnginePod(t, c, ns, "p1", full, nil)
	runManager(t, c)

	c.Create(t, adapter(ns, "sql", "llama", nil, nil))
	ma := waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonMaxAdaptersReached)
	if ma.Status.DesiredReplicas != 1 || ma.Status.ReadyReplicas != 0 {
		t.Errorf("desired/ready = %d/%d, want 1/0", ma.Status.DesiredReplicas, ma.Status.ReadyReplicas)
	}

	// Capacity frees on the engine side; the retry notices without any API event.
	if err := full.UnloadAdapter("other"); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1")
}

func TestCredentialsSecret(t *testing.T) {
	c := startCluster(t)
	ns := newNamespace(t, c, "ma-key")
	e := startEngine(t, "llama", func(c *enginesim.Config) { c.APIKey = "s3cret" })
	newEnginePod(t, c, ns, "p1", e, nil)
	runManager(t, c)

	ma := adapter(ns, "sql", "llama", nil, nil)
	ma.Spec.CredentialsSecretRef = &v1alpha1.SecretReference{Name: "engine"}
	c.Create(t, ma)
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoadFailed)

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "engine"},
		Data:       map[string][]byte{APIKeySecretKey: []byte("s3cret")},
	}
	c.Create(t, secret)
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1")
	if !e.holds(t, "sql") {
		t.Fatal("engine does not hold the adapter")
	}
}

func TestPodDeletedReplacesAdapter(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	ns := newNamespace(t, c, "ma-move")
	e1, e2 := startEngine(t, "llama", nil), startEngine(t, "llama", nil)
	newEnginePod(t, c, ns, "p1", e1, nil)
	p2 := newEnginePod(t, c, ns, "p2", e2, nil)
	// p2 holds more adapters, so least-adapters picks p1 first.
	if err := e2.LoadAdapter(ctx, "x", "/x"); err != nil {
		t.Fatal(err)
	}
	runManager(t, c)
	c.Create(t, adapter(ns, "sql", "llama", nil, ptr.To[int32](1)))
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1")

	p1 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p1"}}
	if err := c.Delete(ctx, p1, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p2")
	if !e2.holds(t, "sql") {
		t.Fatal("the replacement engine does not hold the adapter")
	}

	// With no pod left the adapter has no candidates.
	if err := c.Delete(ctx, p2, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonNoCandidatePods)
}

func TestDeleteUnloadsEverywhere(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	ns, e1, e2 := twoEnginePods(t, c, "ma-delete")
	runManager(t, c)
	ma := adapter(ns, "sql", "llama", nil, nil)
	c.Create(t, ma)
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1", "p2")

	if err := c.Delete(ctx, ma); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ModelAdapter is gone (finalizer removed)", func() bool { return get(t, c, ns, "sql") == nil })
	if e1.holds(t, "sql") || e2.holds(t, "sql") {
		t.Fatal("an engine still holds the deleted adapter")
	}
}

func TestRestartDoesNotLoadTwice(t *testing.T) {
	c := startCluster(t)
	ns := newNamespace(t, c, "ma-restart")
	e1, e2 := startEngine(t, "llama", nil), startEngine(t, "llama", nil)
	newEnginePod(t, c, ns, "p1", e1, nil)
	newEnginePod(t, c, ns, "p2", e2, nil)
	// Every goroutine the manager and the controller start must end when it stops.
	leaks := goleak.IgnoreCurrent()
	// The first manager runs for the subtest only: it has stopped when t.Run returns.
	if !t.Run("first manager", func(t *testing.T) {
		runManager(t, c, e1, e2)
		c.Create(t, adapter(ns, "sql", "llama", nil, nil))
		waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1", "p2")
	}) {
		t.FailNow()
	}
	goleak.VerifyNone(t, leaks)
	if e1.loads.Load() != 1 || e2.loads.Load() != 1 {
		t.Fatalf("loads before restart = %d, %d; want 1, 1", e1.loads.Load(), e2.loads.Load())
	}

	lists1, lists2 := e1.lists.Load(), e2.lists.Load()
	runManager(t, c, e1, e2)
	// Several reconciles of the new manager have asked both engines what they hold.
	waitFor(t, "the new manager probes both engines repeatedly", func() bool {
		return e1.lists.Load() >= lists1+3 && e2.lists.Load() >= lists2+3
	})
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1", "p2")
	if e1.loads.Load() != 1 || e2.loads.Load() != 1 {
		t.Fatalf("loads after restart = %d, %d; want 1, 1", e1.loads.Load(), e2.loads.Load())
	}
	if !slices.Equal(get(t, c, ns, "sql").Finalizers, []string{Finalizer}) {
		t.Errorf("finalizers = %v, want [%s]", get(t, c, ns, "sql").Finalizers, Finalizer)
	}
}

// TestAdapterDeletedWithItsFinalizerIsUnloaded: the API server can carry out a delete
// that raced with the request adding the finalizer (kubernetes/kubernetes#77988), so an
// adapter the controller loaded can leave without finalize. The delete event of an
// adapter carrying the finalizer and no deletion timestamp makes Reconcile unload its
// copies once the API server confirms it is gone; the event of one deleted the ordinary
// way (a deletion timestamp, with or without the finalizer) changes nothing; and an
// adapter created again under the name keeps its copies.
func TestAdapterDeletedWithItsFinalizerIsUnloaded(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	ns, e1, e2 := twoEnginePods(t, c, "ma-orphan")
	var running *Reconciler
	runManagerWith(t, c, func(r *Reconciler) { running = r })
	// A reconciler of the test's own, on the running manager's pod view, reading the API
	// server directly: the race cannot be staged on the API server, so the test hands it
	// the delete event the informer would deliver and reconciles by hand.
	r := &Reconciler{Client: c.Client, APIReader: c.Client, Pods: running.Pods, Engine: engineclient.New(nil),
		MinRetryDelay: 50 * time.Millisecond, MaxRetryDelay: 300 * time.Millisecond}
	// Watch events can fill the pod view before its initial listing is marked applied,
	// and Reconcile waits for that mark: the test waits for both.
	waitFor(t, "the pod view has synced and holds both pods", func() bool {
		return r.Pods.Synced() && len(r.basePods(adapter(ns, "", "llama", nil, nil))) == 2
	})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	reconcileKey := func(name string) reconcile.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
		if err != nil {
			t.Fatalf("Reconcile(%s): %v", name, err)
		}
		return res
	}

	// "gone" never reached the API server's list again: its copies are on both engines.
	for _, e := range []*engine{e1, e2} {
		if err := e.LoadAdapter(ctx, "gone", "s3://adapters/gone"); err != nil {
			t.Fatal(err)
		}
	}
	gone := adapter(ns, "gone", "llama", nil, nil)
	deletedAt := metav1.Now()
	ordinary := []*v1alpha1.ModelAdapter{gone.DeepCopy(), gone.DeepCopy(), gone.DeepCopy()}
	ordinary[0].DeletionTimestamp, ordinary[0].Finalizers = &deletedAt, []string{Finalizer} // as finalize's patch leaves it
	ordinary[1].DeletionTimestamp = &deletedAt                                              // another's finalizer removed last
	// ordinary[2]: never finalized by this controller
	for _, ma := range ordinary {
		r.adapterDeleted(ctx, event.DeleteEvent{Object: ma}, q)
	}
	reconcileKey("gone")
	if !e1.holds(t, "gone") || !e2.holds(t, "gone") || q.Len() != 0 {
		t.Fatal("an adapter deleted the ordinary way was unloaded or enqueued")
	}
	raced := gone.DeepCopy()
	raced.Finalizers = []string{Finalizer}
	r.adapterDeleted(ctx, event.DeleteEvent{Object: raced}, q)
	if q.Len() != 1 {
		t.Fatalf("the delete event of an adapter carrying the finalizer enqueued %d requests, want 1", q.Len())
	}
	if res := reconcileKey("gone"); !res.IsZero() {
		t.Fatalf("Reconcile of the adapter deleted with its finalizer asked to be retried: %+v", res)
	}
	if e1.holds(t, "gone") || e2.holds(t, "gone") {
		t.Fatal("an engine still holds the adapter deleted with its finalizer")
	}
	if _, ok := r.orphans.Load(types.NamespacedName{Namespace: ns, Name: "gone"}); ok {
		t.Error("the adapter is still remembered after its copies were unloaded")
	}

	// "sql" left with its finalizer and was created again: the new adapter's copies stay.
	c.Create(t, adapter(ns, "sql", "llama", nil, nil))
	waitForStatus(t, c, ns, "sql", v1alpha1.ModelAdapterReasonLoaded, "p1", "p2")
	old := get(t, c, ns, "sql").DeepCopy()
	old.UID = "an-earlier-adapter"
	r.adapterDeleted(ctx, event.DeleteEvent{Object: old}, q)
	reconcileKey("sql")
	if !e1.holds(t, "sql") || !e2.holds(t, "sql") {
		t.Fatal("the copies of an adapter created again under a deleted one's name were unloaded")
	}
	if _, ok := r.orphans.Load(types.NamespacedName{Namespace: ns, Name: "sql"}); ok {
		t.Error("the deleted adapter is still remembered though one of its name exists")
	}
}
