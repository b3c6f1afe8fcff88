package modeladapter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/engineclient"
)

const (
	// ControllerName names the controller, its logger and the events it records.
	ControllerName = "modeladapter"
	// Finalizer is set on every ModelAdapter the controller has seen; it is removed once
	// the adapter is unloaded from every reachable engine and from every pod status.artifacts
	// records, unless that pod is gone or terminating.
	Finalizer = "inference.switchboard.dev/unload"
	// APIKeySecretKey is the key of the Secret named by spec.credentialsSecretRef whose
	// value is sent to the engines as a bearer token.
	APIKeySecretKey = "api-key"
)

// Defaults of the Reconciler's tunables.
const (
	DefaultResyncPeriod  = 30 * time.Second
	DefaultMinRetryDelay = time.Second
	DefaultMaxRetryDelay = 30 * time.Second
	DefaultProbeTimeout  = 10 * time.Second
	DefaultLoadTimeout   = engineclient.DefaultTimeout
	// DefaultMaxConcurrentReconciles is how many ModelAdapters are reconciled at once.
	DefaultMaxConcurrentReconciles = 4
)

// PodReader is the view of engine pods the controller places adapters on. *cache.Manager
// satisfies it.
type PodReader interface {
	// ListPods returns every known engine pod, routable or not.
	ListPods() []*cache.Pod
	// Synced reports whether the view holds the pods first listed from the API server.
	Synced() bool
}

var _ PodReader = (*cache.Manager)(nil)

// Reconciler converges ModelAdapters: it loads each adapter on the desired number of
// candidate pods (ready pods in the adapter's namespace that serve its base model and match
// its podSelector), unloads surplus copies, and reports in status the pods whose engine
// confirms the adapter. Fill Client, Pods and Engine; the rest defaults in
// SetupWithManager.
//
// A failed load is retried with backoff (MinRetryDelay doubling to MaxRetryDelay) and
// reported as Ready=False with reason LoadFailed, MaxAdaptersReached or NoCandidatePods;
// a converged adapter is re-checked every ResyncPeriod so that changes made on the engines
// are noticed. A copy loaded from another artifact than spec.artifactURL is reloaded.
//
// Every engine call has its own timeout (ProbeTimeout, LoadTimeout) and up to
// MaxConcurrentReconciles adapters are reconciled at once, so a hung engine delays only
// the adapters placed on it. The controller never acts on a pod view that lags the
// informer's Pods (see cache.PodsBehind): it waits until the view has caught up.
//
// Secrets are read with APIReader, uncached: RBAC grants get on every Secret of the
// watched namespaces, because it cannot be narrowed to the names ModelAdapters reference,
// but the controller neither lists nor watches Secrets nor keeps them in memory.
type Reconciler struct {
	// Client reads and writes ModelAdapters; normally the manager's client.
	Client client.Client
	// APIReader reads Secrets; defaults to the manager's uncached API reader.
	APIReader client.Reader
	// Pods is the engine pod view, normally the manager's cache context.
	Pods PodReader
	// Engine calls the engines' admin API; defaults to engineclient.New(nil).
	Engine *engineclient.Client
	// Recorder records events on ModelAdapters; defaults to the manager's recorder.
	Recorder events.EventRecorder

	// ResyncPeriod is how often a converged adapter is checked against its engines.
	ResyncPeriod time.Duration
	// MinRetryDelay and MaxRetryDelay bound the backoff between failed attempts.
	MinRetryDelay, MaxRetryDelay time.Duration
	// ProbeTimeout bounds each listing of one engine's models and each unload.
	ProbeTimeout time.Duration
	// LoadTimeout bounds each load of the adapter onto one engine.
	LoadTimeout time.Duration
	// MaxConcurrentReconciles is how many ModelAdapters are reconciled at once.
	MaxConcurrentReconciles int

	// shuffle orders candidates for the random scheduler; tests replace it.
	shuffle func([]candidate)
	backoff *retryBackoff
	once    sync.Once
	// orphans holds, by key, the last state of each ModelAdapter that left the API server
	// without finalize, until Reconcile unloaded its copies (see adapterDeleted).
	orphans sync.Map // types.NamespacedName → *v1alpha1.ModelAdapter
}

// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=modeladapters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=modeladapters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=modeladapters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller with mgr: it watches ModelAdapters (spec,
// deletion and finalizer changes) and engine Pods, mapping a Pod to the ModelAdapters of
// its namespace whose baseModel it serves.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.Pods == nil {
		return errors.New("modeladapter reconciler: Client and Pods are required")
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}
	r.defaults()
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.ModelAdapter{}, builder.WithPredicates(adapterChanged)).
		Watches(&v1alpha1.ModelAdapter{}, handler.Funcs{DeleteFunc: r.adapterDeleted}).
		Watches(&corev1.Pod{}, r.podHandler(), builder.WithPredicates(cache.EnginePods)).
		// The name is unique in a manager; tests run many managers in one process.
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.MaxConcurrentReconciles,
			SkipNameValidation:      ptr.To(true),
		}).
		Complete(r)
}

// defaults fills unset tunables once.
func (r *Reconciler) defaults() {
	r.once.Do(func() {
		if r.Engine == nil {
			// No client-wide timeout: ProbeTimeout and LoadTimeout bound each call.
			r.Engine = engineclient.New(&http.Client{})
		}
		if r.ResyncPeriod <= 0 {
			r.ResyncPeriod = DefaultResyncPeriod
		}
		if r.MinRetryDelay <= 0 {
			r.MinRetryDelay = DefaultMinRetryDelay
		}
		if r.MaxRetryDelay <= 0 {
			r.MaxRetryDelay = DefaultMaxRetryDelay
		}
		r.MaxRetryDelay = max(r.MaxRetryDelay, r.MinRetryDelay)
		if r.ProbeTimeout <= 0 {
			r.ProbeTimeout = DefaultProbeTimeout
		}
		if r.LoadTimeout <= 0 {
			r.LoadTimeout = DefaultLoadTimeout
		}
		if r.MaxConcurrentReconciles <= 0 {
			r.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
		}
		r.backoff = &retryBackoff{initial: r.MinRetryDelay, max: r.MaxRetryDelay}
	})
}

// adapterChanged passes ModelAdapter events other than status-only updates.
var adapterChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			!e.ObjectNew.GetDeletionTimestamp().IsZero() ||
			!slices.Equal(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers())
	},
}

// adapterDeleted remembers a ModelAdapter that left the API server carrying Finalizer but
// no deletion timestamp, and enqueues it, for Reconcile to unload its copies. An adapter
// deleted the ordinary way gets a deletion timestamp and goes once finalize removed the
// finalizer; its delete event still shows the finalizer, as the API server reports the
// state it removed, but also the timestamp. One without the timestamp was removed at
// once: the API server can carry out a delete that raced with the request adding the
// finalizer, both succeeding (kubernetes/kubernetes#77988), and the controller may have
// loaded the adapter since, as the finalizer was in place.
func (r *Reconciler) adapterDeleted(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	ma, ok := e.Object.(*v1alpha1.ModelAdapter)
	if !ok || !ma.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(ma, Finalizer) {
		return
	}
	key := client.ObjectKeyFromObject(ma)
	r.orphans.Store(key, ma.DeepCopy())
	q.Add(reconcile.Request{NamespacedName: key})
}

// podHandler enqueues the ModelAdapters affected by a Pod event. The pod view is fed by
// its own controller and may lag the event; Reconcile then waits for it (podsBehind).
func (r *Reconciler) podHandler() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		for _, req := range r.adaptersFor(ctx, objs...) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

// adaptersFor returns the ModelAdapters in the pods' namespaces whose baseModel the pods
// serve, without duplicates.
func (r *Reconciler) adaptersFor(ctx context.Context, pods ...client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, pod := range pods {
		model := pod.GetLabels()[v1alpha1.LabelModel]
		if model == "" {
			continue
		}
		var list v1alpha1.ModelAdapterList
		if err := r.Client.List(ctx, &list, client.InNamespace(pod.GetNamespace())); err != nil {
			log.FromContext(ctx).Error(err, "list modeladapters for pod event", "pod", client.ObjectKeyFromObject(pod))
			continue
		}
		for _, ma := range list.Items {
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ma)}
			if ma.Spec.BaseModel == model && !slices.Contains(reqs, req) {
				reqs = append(reqs, req)
			}
		}
	}
	return reqs
}

// Reconcile converges one ModelAdapter with its engines and writes its status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.defaults()
	ma := new(v1alpha1.ModelAdapter)
	if err := r.Client.Get(ctx, req.NamespacedName, ma); err != nil {
		if apierrors.IsNotFound(err) {
			return r.unloadOrphan(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, err
	}
	if v, ok := r.orphans.Load(req.NamespacedName); ok && v.(*v1alpha1.ModelAdapter).UID != ma.UID {
		r.orphans.Delete(req.NamespacedName) // a new adapter of that name: its copies are its own
	}
	if !r.Pods.Synced() {
		// An unsynced pod view would look like a cluster without engines.
		return reconcile.Result{RequeueAfter: r.MinRetryDelay}, nil
	}
	behind, err := r.podsBehind(ctx, ma)
	if err != nil {
		return reconcile.Result{}, err
	}
	if behind {
		// Acting now could load onto, or unload from, a pod as it was rather than as it is.
		log.FromContext(ctx).V(1).Info("pod view behind the informer; waiting")
		return reconcile.Result{RequeueAfter: r.MinRetryDelay}, nil
	}
	if !ma.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, ma)
	}
	if !controllerutil.ContainsFinalizer(ma, Finalizer) {
		patch := client.MergeFromWithOptions(ma.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(ma, Finalizer)
		if err := r.Client.Patch(ctx, ma, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	return r.converge(ctx, ma)
}

// podsBehind reports whether the pod view lags the informer's Pods that serve ma's base
// model in its namespace.
func (r *Reconciler) podsBehind(ctx context.Context, ma *v1alpha1.ModelAdapter) (bool, error) {
	var listed corev1.PodList
	if err := r.Client.List(ctx, &listed, client.InNamespace(ma.Namespace),
		client.MatchingLabels{v1alpha1.LabelModel: ma.Spec.BaseModel}); err != nil {
		return false, fmt.Errorf("list pods: %w", err)
	}
	known := map[endpoint.Key]*cache.Pod{}
	for _, p := range r.basePods(ma) {
		known[p.Key] = p
	}
	return cache.PodsBehind(listed.Items, known), nil
}

// engineURL returns the base URL of a pod's engine admin API.
func engineURL(p *cache.Pod) string {
	return "http://" + net.JoinHostPort(p.Address, strconv.Itoa(int(p.Port)))
}

// apiKey returns the engine API key of ma: the "api-key" value of the Secret named by
// spec.credentialsSecretRef, or "" when there is none.
func (r *Reconciler) apiKey(ctx context.Context, ma *v1alpha1.ModelAdapter) (string, error) {
	ref := ma.Spec.CredentialsSecretRef
	if ref == nil {
		return "", nil
	}
	var secret corev1.Secret
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ma.Namespace, Name: ref.Name}, &secret); err != nil {
		return "", fmt.Errorf("get credentials secret %s: %w", ref.Name, err)
	}
	key, ok := secret.Data[APIKeySecretKey]
	if !ok || len(key) == 0 {
		return "", fmt.Errorf("credentials secret %s has no %q key", ref.Name, APIKeySecretKey)
	}
	return string(key), nil
}

// engineState is what one engine reported.
type engineState struct {
	pod   *cache.Pod
	cards []engineclient.Model
	err   error
}

// card returns the engine's model card of name, if the engine listed it.
func (s engineState) card(name string) (engineclient.Model, bool) {
	i := slices.IndexFunc(s.cards, func(m engineclient.Model) bool { return m.ID == name })
	if s.err != nil || i < 0 {
		return engineclient.Model{}, false
	}
	return s.cards[i], true
}

// holds reports whether the engine listed the adapter name.
func (s engineState) holds(name string) bool {
	_, ok := s.card(name)
	return ok
}

// probe lists the models of every pod's engine concurrently.
func (r *Reconciler) probe(ctx context.Context, pods []*cache.Pod, key string) map[string]engineState {
	states := make(map[string]engineState, len(pods))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Go(func() {
			cards, err := r.models(ctx, p, key)
			mu.Lock()
			states[p.Key.Name] = engineState{pod: p, cards: cards, err: err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return states
}

// models lists one engine's models within ProbeTimeout.
func (r *Reconciler) models(ctx context.Context, p *cache.Pod, key string) ([]engineclient.Model, error) {
	ctx, cancel := context.WithTimeout(ctx, r.ProbeTimeout)
	defer cancel()
	return r.Engine.ModelCards(ctx, engineURL(p), key)
}

// load loads the adapter onto one engine within LoadTimeout; an engine that already
// holds it counts as success.
func (r *Reconciler) load(ctx context.Context, p *cache.Pod, key string, ma *v1alpha1.ModelAdapter) error {
	ctx, cancel := context.WithTimeout(ctx, r.LoadTimeout)
	defer cancel()
	err := r.Engine.LoadAdapter(ctx, engineURL(p), key, ma.Name, ma.Spec.ArtifactURL)
	if errors.Is(err, engineclient.ErrAlreadyLoaded) {
		return nil
	}
	return err
}

// unload unloads the adapter from one engine within ProbeTimeout; an engine that does not
// hold it counts as success.
func (r *Reconciler) unload(ctx context.Context, p *cache.Pod, key, name string) error {
	ctx, cancel := context.WithTimeout(ctx, r.ProbeTimeout)
	defer cancel()
	err := r.Engine.UnloadAdapter(ctx, engineURL(p), key, name)
	if errors.Is(err, engineclient.ErrNotLoaded) {
		return nil
	}
	return err
}

// basePods returns the pods of ma's namespace that serve its base model, sorted by name.
func (r *Reconciler) basePods(ma *v1alpha1.ModelAdapter) []*cache.Pod {
	var pods []*cache.Pod
	for _, p := range r.Pods.ListPods() {
		if p.Key.Namespace == ma.Namespace && p.BaseModel == ma.Spec.BaseModel {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b *cache.Pod) int { return cmp.Compare(a.Key.Name, b.Key.Name) })
	return pods
}

// finalize unloads the adapter from every reachable engine serving its base model, then
// removes the finalizer (see unloadAll).
func (r *Reconciler) finalize(ctx context.Context, ma *v1alpha1.ModelAdapter) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(ma, Finalizer) {
		return reconcile.Result{}, nil
	}
	if res, err := r.unloadAll(ctx, ma); err != nil || !res.IsZero() {
		return res, err
	}
	patch := client.MergeFromWithOptions(ma.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(ma, Finalizer)
	if err := r.Client.Patch(ctx, ma, patch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("remove finalizer: %w", err))
	}
	r.backoff.forget(client.ObjectKeyFromObject(ma))
	return reconcile.Result{}, nil
}

// unloadOrphan unloads the copies of the ModelAdapter of key if it left the API server
// without finalize (adapterDeleted), once the API server confirms it is gone rather
// than the cache lagging its creation; it forgets the adapter once every copy is
// unloaded, and retries with backoff until then.
func (r *Reconciler) unloadOrphan(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
	v, ok := r.orphans.Load(key)
	if !ok {
		r.backoff.forget(key)
		return reconcile.Result{}, nil
	}
	if err := r.APIReader.Get(ctx, key, new(v1alpha1.ModelAdapter)); !apierrors.IsNotFound(err) {
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("read deleted adapter: %w", err)
		}
		r.orphans.Delete(key) // created again: the new adapter's reconcile places its copies
		return reconcile.Result{}, nil
	}
	if !r.Pods.Synced() {
		return reconcile.Result{RequeueAfter: r.MinRetryDelay}, nil
	}
	ma := v.(*v1alpha1.ModelAdapter)
	log.FromContext(ctx).Info("unloading an adapter deleted before its finalizer ran")
	if res, err := r.unloadAll(ctx, ma); err != nil || !res.IsZero() {
		return res, err
	}
	r.orphans.CompareAndDelete(key, v)
	r.backoff.forget(key)
	return reconcile.Result{}, nil
}

// unloadAll unloads the adapter from every reachable engine serving its base model; a
// zero result and no error mean that none holds it any more. An unreachable engine is skipped unless
// status.artifacts records its pod, which is not terminating: the engine may still hold
// the adapter, so unloadAll retries until the engine answers or the pod goes. An engine
// that refuses the unload, or the API key, is retried too.
func (r *Reconciler) unloadAll(ctx context.Context, ma *v1alpha1.ModelAdapter) (reconcile.Result, error) {
	logger := log.FromContext(ctx)
	key, err := r.apiKey(ctx, ma)
	if err != nil {
		// Engines without a key still accept the unload; keyed ones answer 401 below.
		logger.Info("unloading without an API key", "error", err.Error())
	}
	var pods []*cache.Pod
	for _, p := range r.basePods(ma) {
		if p.Address != "" {
			pods = append(pods, p)
		}
	}
	recorded := recordedArtifacts(&ma.Status)
	var errs []error
	var waiting []string
	for name, s := range r.probe(ctx, pods, key) {
		_, held := recorded[name]
		switch {
		case errors.Is(s.err, engineclient.ErrUnauthorized):
			errs = append(errs, fmt.Errorf("pod %s: %w", name, s.err))
		case s.err != nil && held && !s.pod.Terminating:
			waiting = append(waiting, name)
		case s.err != nil:
			logger.Info("skipping unreachable engine", "pod", name, "error", s.err.Error())
		case s.holds(ma.Name):
			if err := r.unloadCopy(ctx, ma, key, s); err != nil {
				errs = append(errs, fmt.Errorf("pod %s: %w", name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		r.event(ma, corev1.EventTypeWarning, "UnloadFailed", "Unload", "%v", err)
		return reconcile.Result{}, fmt.Errorf("unload adapter before deletion: %w", err)
	}
	if len(waiting) > 0 {
		slices.Sort(waiting)
		r.event(ma, corev1.EventTypeWarning, "UnloadPending", "Unload",
			"Waiting for the engines of pods %s to answer to unload the adapter", strings.Join(waiting, ", "))
		return reconcile.Result{RequeueAfter: r.backoff.next(client.ObjectKeyFromObject(ma))}, nil
	}
	return reconcile.Result{}, nil
}

// event records an event on ma when a recorder is set.
func (r *Reconciler) event(ma *v1alpha1.ModelAdapter, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(ma, nil, eventType, reason, action, note, args...)
	}
}

// outcome is what one converge pass observed and did, from which the status follows.
type outcome struct {
	// candidates is the number of ready pods matching the selector and base model.
	candidates int
	// want is the desired number of replicas.
	want int32
	// all reports that spec.replicas is unset: every candidate pod is desired.
	all bool
	// instances are the pods whose engine confirmed the adapter, each with the artifact
	// of its copy ("" when unknown).
	instances map[string]string
	// unreachable are the recorded pods whose engine could not be asked, with their
	// recorded artifact: they may still hold the adapter.
	unreachable map[string]string
	// failures are the failed probes, loads and reloads on candidate pods.
	failures []error
	// pending reports loads the engine accepted but does not list yet.
	pending bool
	// keyErr is the failure to read the API key.
	keyErr error
	// selectorErr is an invalid podSelector.
	selectorErr error
}

// converge brings the engines in line with ma's spec and writes the status.
func (r *Reconciler) converge(ctx context.Context, ma *v1alpha1.ModelAdapter) (reconcile.Result, error) {
	o := r.place(ctx, ma)
	if err := r.writeStatus(ctx, ma, o); err != nil {
		if apierrors.IsConflict(err) {
			// The status read was older than the stored one (a lagging informer): what
			// it records is the controller's memory of the copies, so read it again.
			return reconcile.Result{RequeueAfter: r.MinRetryDelay}, nil
		}
		return reconcile.Result{}, err
	}
	key := client.ObjectKeyFromObject(ma)
	switch {
	case o.selectorErr != nil:
		return reconcile.Result{}, reconcile.TerminalError(o.selectorErr)
	case o.keyErr != nil || len(o.failures) > 0 || o.pending:
		return reconcile.Result{RequeueAfter: r.backoff.next(key)}, nil
	}
	r.backoff.forget(key)
	return reconcile.Result{RequeueAfter: r.ResyncPeriod}, nil
}

// place probes the engines, loads, reloads and unloads the adapter, and reports the
// outcome.
func (r *Reconciler) place(ctx context.Context, ma *v1alpha1.ModelAdapter) outcome {
	recorded := recordedArtifacts(&ma.Status)
	var o outcome
	selector, err := metav1.LabelSelectorAsSelector(ma.Spec.PodSelector)
	if err != nil {
		o.selectorErr = fmt.Errorf("invalid spec.podSelector: %w", err)
		o.instances, o.unreachable = splitRecorded(&ma.Status, recorded)
		return o
	}
	key, err := r.apiKey(ctx, ma)
	if err != nil {
		o.keyErr = err
		o.instances, o.unreachable = splitRecorded(&ma.Status, recorded)
	}

	// Candidates are routable pods matching the selector; recorded pods that no longer
	// are candidates but still run are probed too, so their copy is unloaded.
	var cands, others []*cache.Pod
	for _, p := range r.basePods(ma) {
		_, held := recorded[p.Key.Name]
		switch {
		case p.Routable() && selector.Matches(labels.Set(p.Labels)):
			cands = append(cands, p)
		case p.Address != "" && !p.Terminating && held:
			others = append(others, p)
		}
	}
	o.candidates = len(cands)
	o.want, o.all = int32(len(cands)), ma.Spec.Replicas == nil
	if !o.all {
		o.want = *ma.Spec.Replicas
	}
	if o.keyErr != nil {
		return o
	}
	target := min(int(o.want), len(cands))

	states := r.probe(ctx, append(slices.Clone(cands), others...), key)
	o.instances, o.unreachable = map[string]string{}, map[string]string{}
	for name, s := range states {
		if url, held := recorded[name]; held && s.err != nil {
			o.unreachable[name] = url
		}
	}
	var reachable []candidate
	for _, p := range cands {
		s := states[p.Key.Name]
		if s.err != nil {
			o.failures = append(o.failures, fmt.Errorf("pod %s: %w", p.Key.Name, s.err))
			continue
		}
		reachable = append(reachable, candidate{
			name:     p.Key.Name,
			adapters: max(len(s.cards)-1, 0), // every model but the base one is an adapter
			loaded:   s.holds(ma.Name),
			stale:    s.holds(ma.Name) && copyArtifact(ma, recorded, s) != ma.Spec.ArtifactURL,
		})
	}
	pl := plan(reachable, target, schedulerOf(ma), r.shuffle)
	for _, name := range pl.keep {
		o.instances[name] = ma.Spec.ArtifactURL
	}

	// Unload surplus copies and copies on pods that are no longer candidates.
	drop := slices.Clone(pl.drop)
	for _, p := range others {
		if states[p.Key.Name].holds(ma.Name) {
			drop = append(drop, p.Key.Name)
		}
	}
	for _, name := range drop {
		if err := r.unloadCopy(ctx, ma, key, states[name]); err != nil {
			// Still loaded, so still served there: the engine's state wins.
			log.FromContext(ctx).Error(err, "unload surplus adapter", "pod", name)
			o.instances[name] = copyArtifact(ma, recorded, states[name])
		}
	}

	// Reload stale copies where they are, then load onto the preferred free pods until
	// the target is met or none is left.
	var reload []string
	for _, name := range pl.reload {
		if err := r.unloadCopy(ctx, ma, key, states[name]); err != nil {
			o.failures = append(o.failures, fmt.Errorf("pod %s: reload: %w", name, err))
			o.instances[name] = copyArtifact(ma, recorded, states[name])
			continue
		}
		reload = append(reload, name)
	}
	r.loadOnto(ctx, ma, key, reload, states, &o)
	need := target - len(pl.keep) - len(pl.reload)
	queue := pl.load
	for need > 0 && len(queue) > 0 {
		batch := queue[:min(need, len(queue))]
		queue = queue[len(batch):]
		need -= r.loadOnto(ctx, ma, key, batch, states, &o)
	}
	return o
}

// unloadCopy unloads the adapter from the engine of s and records the event.
func (r *Reconciler) unloadCopy(ctx context.Context, ma *v1alpha1.ModelAdapter, key string, s engineState) error {
	if err := r.unload(ctx, s.pod, key, ma.Name); err != nil {
		return err
	}
	log.FromContext(ctx).Info("unloaded adapter", "pod", s.pod.Key.Name)
	r.event(ma, corev1.EventTypeNormal, "Unloaded", "Unload", "Unloaded from pod %s", s.pod.Key.Name)
	return nil
}

// loadOnto loads the adapter onto the named pods, adds the outcome to o and returns how
// many pods took it: confirmed, or accepted and not listed yet.
func (r *Reconciler) loadOnto(ctx context.Context, ma *v1alpha1.ModelAdapter, key string, pods []string, states map[string]engineState, o *outcome) int {
	took := 0
	for _, res := range r.loadAll(ctx, ma, key, pods, states) {
		switch {
		case res.err != nil:
			o.failures = append(o.failures, fmt.Errorf("pod %s: %w", res.pod, res.err))
			r.event(ma, corev1.EventTypeWarning, reasonOf(res.err), "Load", "Loading on pod %s failed: %v", res.pod, res.err)
		case res.confirmed:
			o.instances[res.pod] = ma.Spec.ArtifactURL
			took++
			r.event(ma, corev1.EventTypeNormal, v1alpha1.ModelAdapterReasonLoaded, "Load",
				"Loaded on pod %s from %s", res.pod, ma.Spec.ArtifactURL)
		default:
			// Accepted but not listed yet (an engine still loading it): check again soon
			// rather than loading a second copy elsewhere.
			o.pending = true
			took++
		}
	}
	return took
}

// loadResult is the outcome of loading onto one pod.
type loadResult struct {
	pod       string
	confirmed bool
	err       error
}

// loadAll loads the adapter onto the named pods concurrently and confirms each load
// through GET /v1/models.
func (r *Reconciler) loadAll(ctx context.Context, ma *v1alpha1.ModelAdapter, key string, pods []string, states map[string]engineState) []loadResult {
	results := make([]loadResult, len(pods))
	var wg sync.WaitGroup
	for i, name := range pods {
		p := states[name].pod
		wg.Go(func() {
			res := loadResult{pod: name}
			if res.err = r.load(ctx, p, key, ma); res.err == nil {
				cards, err := r.models(ctx, p, key)
				res.err = err
				res.confirmed = engineState{pod: p, cards: cards, err: err}.holds(ma.Name)
			}
			log.FromContext(ctx).V(1).Info("load adapter", "pod", name, "confirmed", res.confirmed, "error", res.err)
			results[i] = res
		})
	}
	wg.Wait()
	return results
}

// schedulerOf returns ma's scheduler, least-adapters when unset.
func schedulerOf(ma *v1alpha1.ModelAdapter) v1alpha1.AdapterScheduler {
	if ma.Spec.SchedulerName == "" {
		return v1alpha1.SchedulerLeastAdapters
	}
	return ma.Spec.SchedulerName
}

// reasonOf returns the Ready reason of a failed load.
func reasonOf(err error) string {
	if errors.Is(err, engineclient.ErrMaxAdapters) {
		return v1alpha1.ModelAdapterReasonMaxAdaptersReached
	}
	return v1alpha1.ModelAdapterReasonLoadFailed
}

// writeStatus patches ma's status to reflect o, skipping the write when nothing changed.
func (r *Reconciler) writeStatus(ctx context.Context, ma *v1alpha1.ModelAdapter, o outcome) error {
	status := ma.Status.DeepCopy()
	setStatus(status, ma.Generation, ma.Namespace, ma.Spec.BaseModel, o)
	if equality.Semantic.DeepEqual(*status, ma.Status) {
		return nil
	}
	// Status records where copies are (status.artifacts), which no engine may tell again
	// once unreachable: a write based on an outdated read must fail rather than forget.
	patch := client.MergeFromWithOptions(ma.DeepCopy(), client.MergeFromWithOptimisticLock{})
	ma.Status = *status
	if err := r.Client.Status().Patch(ctx, ma, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("patch status: %w", err))
	}
	return nil
}
