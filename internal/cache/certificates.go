package cache

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// certificateRefsIndex indexes Gateways in the informer cache by the Secrets their
// listeners' tls.certificateRefs name ("namespace/name").
const certificateRefsIndex = "switchboard.dev/certificate-refs"

// certificateFeed mirrors into store the certificates of the Secrets that listeners of
// Switchboard's Gateways (those of a GatewayClass naming routetable.ControllerName) name,
// and only those: the gateway keeps no other Secret's data in memory. Secrets are
// watched metadata-only, so the informer cache holds no Secret data either; the data of
// a named Secret is read through the uncached API reader when its resourceVersion
// changes and when it becomes named (an event of a Gateway or GatewayClass). Whether a
// ReferenceGrant permits a Gateway to use the Secret is for the route table to decide.
//
// It is a level-based reconciler keyed by Secret, like feed; mu serialises its
// reconciles with the initial listing, and guards read.
type certificateFeed struct {
	store *Store[routetable.Certificate]

	// cache is the manager's informer cache (Gateways, GatewayClasses, Secret metadata)
	// and api its uncached reader (Secret data); both are set by register.
	cache, api client.Reader

	mu sync.Mutex
	// read is the resourceVersion at which each stored Secret was read.
	read map[types.NamespacedName]string
}

var _ reconcile.Reconciler = (*certificateFeed)(nil)

func newCertificateFeed(store *Store[routetable.Certificate]) *certificateFeed {
	return &certificateFeed{store: store, read: map[types.NamespacedName]string{}}
}

// secretMetadata returns an empty metadata-only Secret, the form in which the informer
// cache holds Secrets.
func secretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// register indexes Gateways by the Secrets they name and adds the feed's controller,
// named after role, to mgr: Secret metadata events, and Gateway and GatewayClass events
// mapped to the Secrets they name.
func (f *certificateFeed) register(mgr ctrl.Manager, role string) error {
	f.cache, f.api = mgr.GetCache(), mgr.GetAPIReader()
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &gatewayv1.Gateway{}, certificateRefsIndex, func(o client.Object) []string {
		var keys []string
		for _, key := range routetable.CertificateRefs(o.(*gatewayv1.Gateway)) {
			keys = append(keys, key.String())
		}
		return keys
	})
	if err != nil {
		return fmt.Errorf("index gateways by certificateRefs: %w", err)
	}
	err = builder.ControllerManagedBy(mgr).
		Named(role+"-cache-certificate").
		For(&corev1.Secret{}, builder.OnlyMetadata).
		Watches(&gatewayv1.Gateway{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return secretRequests(o.(*gatewayv1.Gateway))
		})).
		Watches(&gatewayv1.GatewayClass{}, handler.EnqueueRequestsFromMapFunc(f.classSecrets)).
		// Names are unique per role; many caches may live in one test process.
		// Every replica keeps its own cache.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true), NeedLeaderElection: ptr.To(false)}).
		Complete(f)
	if err != nil {
		return fmt.Errorf("register certificate feed: %w", err)
	}
	return nil
}

// secretRequests returns a request for every Secret gw names.
func secretRequests(gw *gatewayv1.Gateway) []reconcile.Request {
	var out []reconcile.Request
	for _, key := range routetable.CertificateRefs(gw) {
		out = append(out, reconcile.Request{NamespacedName: key})
	}
	return out
}

// classSecrets returns a request for every Secret the Gateways of class name.
func (f *certificateFeed) classSecrets(ctx context.Context, class client.Object) []reconcile.Request {
	var gateways gatewayv1.GatewayList
	if err := f.cache.List(ctx, &gateways, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "List Gateways for a GatewayClass event", "gatewayClass", class.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range gateways.Items {
		if string(gateways.Items[i].Spec.GatewayClassName) == class.GetName() {
			out = append(out, secretRequests(&gateways.Items[i])...)
		}
	}
	return out
}

// Reconcile mirrors the certificate of the Secret named by req, if one of Switchboard's
// Gateways names it, and forgets it otherwise.
func (f *certificateFeed) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return reconcile.Result{}, f.sync(ctx, req.NamespacedName)
}

// sync reads the Secret key if it is named and changed since it was last read, or
// forgets it. The caller holds f.mu.
func (f *certificateFeed) sync(ctx context.Context, key types.NamespacedName) error {
	named, err := f.named(ctx, key)
	if err != nil {
		return err
	}
	m := secretMetadata()
	if named {
		if err := f.cache.Get(ctx, key, m); err != nil {
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("get secret %s metadata: %w", key, err)
			}
			named = false
		}
	}
	if !named {
		f.forget(key)
		return nil
	}
	if rv, ok := f.read[key]; ok && rv == m.ResourceVersion {
		return nil
	}
	var secret corev1.Secret
	if err := f.api.Get(ctx, key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			f.forget(key)
			return nil
		}
		return fmt.Errorf("get secret %s: %w", key, err)
	}
	f.store.set(key, routetable.ParseCertificate(&secret))
	f.read[key] = secret.ResourceVersion
	return nil
}

// forget removes the Secret key from the store. The caller holds f.mu.
func (f *certificateFeed) forget(key types.NamespacedName) {
	f.store.remove(key)
	delete(f.read, key)
}

// named reports whether a listener of one of Switchboard's Gateways names the Secret key.
func (f *certificateFeed) named(ctx context.Context, key types.NamespacedName) (bool, error) {
	var gateways gatewayv1.GatewayList
	if err := f.cache.List(ctx, &gateways, client.MatchingFields{certificateRefsIndex: key.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("list gateways naming secret %s: %w", key, err)
	}
	for i := range gateways.Items {
		var class gatewayv1.GatewayClass
		err := f.cache.Get(ctx, types.NamespacedName{Name: string(gateways.Items[i].Spec.GatewayClassName)}, &class)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, fmt.Errorf("get gatewayclass %s: %w", gateways.Items[i].Spec.GatewayClassName, err)
		case class.Spec.ControllerName == routetable.ControllerName:
			return true, nil
		}
	}
	return false, nil
}

// prime reads the Secrets every Gateway in the informer cache names, blocking until the
// informers have synced. Secrets that cannot be read are left to their reconciles.
func (f *certificateFeed) prime(ctx context.Context) error {
	var gateways gatewayv1.GatewayList
	if err := f.cache.List(ctx, &gateways); err != nil {
		return fmt.Errorf("list gateways: %w", err)
	}
	var keys []types.NamespacedName
	for i := range gateways.Items {
		keys = append(keys, routetable.CertificateRefs(&gateways.Items[i])...)
	}
	slices.SortFunc(keys, compareNames)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range slices.Compact(keys) {
		if err := f.sync(ctx, key); err != nil {
			log.FromContext(ctx).Error(err, "Skipping certificate", "secret", key)
		}
	}
	return nil
}
