package cache

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// feed mirrors one kind of Kubernetes object into the metadata cache. It is a level-based
// reconciler: for each key it reads the object from the manager's informer cache and
// applies it, or removes it when the object is gone. A delete the informer saw only as a
// tombstone therefore removes the object like any other delete.
type feed[T client.Object] struct {
	// kind names the object kind in controller names, logs and errors.
	kind string
	// newObject and newList return empty values of the kind and of its list.
	newObject func() T
	newList   func() client.ObjectList
	// apply records an existing object; an error means the object is invalid and will not
	// become valid until it changes.
	apply func(T) error
	// remove forgets the object with the given key, if known.
	remove func(types.NamespacedName)
	// batch, if set, runs the initial listing's applies as one change of the store they
	// write (Store.batch).
	batch func(func())
	// predicates filter the watch events that reach Reconcile.
	predicates []predicate.Predicate
	// triggers are other kinds whose changes reconcile objects of this kind: apply reads
	// them too.
	triggers []trigger

	// reader is the manager's informer cache; set by register.
	reader client.Reader
	// mu makes each read-and-apply atomic with respect to the initial listing, so that a
	// listed object cannot overwrite a newer state reconciled concurrently.
	mu sync.Mutex
}

var _ reconcile.Reconciler = (*feed[client.Object])(nil)

// trigger reconciles, on every change of an object of another kind, the keys that keys
// maps it to.
type trigger struct {
	object client.Object
	keys   handler.MapFunc
}

// register adds the feed's controller, named after role and kind, to mgr. The controller
// runs on every replica of mgr, without leader election.
func (f *feed[T]) register(mgr ctrl.Manager, role string) error {
	f.reader = mgr.GetCache()
	b := builder.ControllerManagedBy(mgr).
		Named(role+"-cache-"+f.kind).
		For(f.newObject(), builder.WithPredicates(f.predicates...)).
		WithOptions(controller.Options{
			// Names are unique per role; many caches may live in one test process.
			SkipNameValidation: ptr.To(true),
			// Every replica keeps its cache current, leader or not, so that a standby
			// taking over acts on the API server's state rather than on what it first
			// listed.
			NeedLeaderElection: ptr.To(false),
		})
	for _, t := range f.triggers {
		b = b.Watches(t.object, handler.EnqueueRequestsFromMapFunc(t.keys))
	}
	err := b.Complete(f)
	if err != nil {
		return fmt.Errorf("register %s feed: %w", f.kind, err)
	}
	return nil
}

// Reconcile mirrors the object named by req into the cache.
func (f *feed[T]) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.sync(ctx, req.NamespacedName); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}

// sync reads the object key and applies or removes it. The caller holds f.mu.
func (f *feed[T]) sync(ctx context.Context, key types.NamespacedName) error {
	obj := f.newObject()
	if err := f.reader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			f.remove(key)
			return nil
		}
		return fmt.Errorf("get %s %s: %w", f.kind, key, err)
	}
	if err := f.apply(obj); err != nil {
		return reconcile.TerminalError(fmt.Errorf("%s %s: %w", f.kind, key, err))
	}
	return nil
}

// prime applies every object of the kind in the informer cache, blocking until the kind's
// informer has synced. Invalid objects are logged and skipped, as Reconcile would.
func (f *feed[T]) prime(ctx context.Context) error {
	list := f.newList()
	if err := f.reader.List(ctx, list); err != nil {
		return fmt.Errorf("list %s: %w", f.kind, err)
	}
	batch := f.batch
	if batch == nil {
		batch = func(writes func()) { writes() }
	}
	var err error
	batch(func() {
		err = meta.EachListItem(list, func(o runtime.Object) error {
			key := client.ObjectKeyFromObject(o.(client.Object))
			f.mu.Lock()
			defer f.mu.Unlock()
			if err := f.sync(ctx, key); err != nil {
				log.FromContext(ctx).Error(err, "Skipping object", "kind", f.kind, "object", key)
			}
			return nil
		})
	})
	return err
}

// initialSync is a manager runnable that, once the informers have synced, applies every
// object of its feeds and then marks the cache synced. Watch events keep the cache
// current afterwards.
type initialSync struct {
	feeds  []kindFeed
	synced chan struct{}
}

// Start primes the feeds, closes synced and returns; it returns early if ctx ends.
func (s *initialSync) Start(ctx context.Context) error {
	for _, f := range s.feeds {
		if err := f.prime(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	close(s.synced)
	log.FromContext(ctx).Info("Metadata cache synced")
	return nil
}

// NeedLeaderElection reports false: every replica keeps its own cache.
func (s *initialSync) NeedLeaderElection() bool { return false }
