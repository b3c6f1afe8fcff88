package gatewaystatus

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/bindreport"
	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// ControllerName is the name of the Gateway API status controller.
const ControllerName = "gateway-api-status"

// everything is the one request the reconciler works on: any change recomputes all.
var everything = reconcile.Request{NamespacedName: types.NamespacedName{Name: "switchboard-gateway-api"}}

// Reconciler writes the status of Switchboard's GatewayClasses, Gateways and the
// HTTPRoutes attached to them, and allocates the addresses of Gateways without
// spec.addresses.
type Reconciler struct {
	// Client reads from the manager's informer cache and writes status; it is required.
	Client client.Client
	// AddressPool is where Gateways without spec.addresses get their address from. With
	// a nil pool such Gateways get none and are not programmed (AddressNotAssigned).
	AddressPool *AddressPool
	// Binds, when set, reports the Gateway addresses and ports that gateway replicas cannot
	// bind; each change recomputes every status. Without it, only what the manager sees
	// decides whether a Gateway is programmed.
	Binds *bindreport.Poller
	// APIReader reads the data of the Secrets that listeners' tls.certificateRefs name,
	// uncached: Secrets are watched metadata-only, so the informer cache holds no Secret
	// data. Defaults to the manager's API reader.
	APIReader client.Reader

	certificates *certificateReader
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses;gateways;httproutes;referencegrants,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses/status;gateways/status;httproutes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=routingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.networking.k8s.io,resources=inferencepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.networking.k8s.io,resources=inferencepools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=services;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// SetupWithManager registers the reconciler with mgr. It watches everything ReadInput
// lists, the metadata of the Secrets Gateways' listeners name, and Binds' events; every
// event enqueues the same request, so bursts collapse into one recomputation.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		return errors.New("gateway status reconciler needs a Client")
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	r.certificates = &certificateReader{meta: r.Client, api: r.APIReader}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{everything}
	})
	certificates := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, secret client.Object) []reconcile.Request {
		named, err := referencedSecret(ctx, r.Client, client.ObjectKeyFromObject(secret))
		if err != nil || named { // on doubt, recompute
			return []reconcile.Request{everything}
		}
		return nil
	})
	b := ctrl.NewControllerManagedBy(mgr).Named(ControllerName)
	if r.Binds != nil {
		b = b.WatchesRawSource(source.Channel(r.Binds.Events(), all))
	}
	b = b.
		Watches(&gatewayv1.GatewayClass{}, all).
		Watches(&gatewayv1.Gateway{}, all).
		Watches(&gatewayv1.HTTPRoute{}, all).
		Watches(&gatewayv1.ReferenceGrant{}, all).
		Watches(&corev1.Namespace{}, all).
		Watches(&corev1.Service{}, all).
		Watches(&v1alpha1.RoutingPolicy{}, all).
		Watches(&corev1.Secret{}, certificates, builder.OnlyMetadata)
	if servesPools(mgr) {
		b = b.Watches(&inferencev1.InferencePool{}, all)
	}
	err := b.Complete(r)
	if err != nil {
		return fmt.Errorf("register %s controller: %w", ControllerName, err)
	}
	return nil
}

// Reconcile gives addresses to the Gateways that need one, builds the route table the
// gateway serves from the same objects and the certificates of the Secrets their
// listeners name, and writes every status that differs from it. The request is ignored.
// It needs SetupWithManager to have run.
//
// Writes carry the resourceVersion read from the cache: a write that conflicts was
// computed from a stale object, whose newer version's watch event recomputes everything,
// so it is dropped rather than retried.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	in, pools, err := readInput(ctx, r.Client)
	if err != nil {
		return reconcile.Result{}, err
	}
	classes := map[string]*gatewayv1.GatewayClass{}
	for _, gc := range in.Classes {
		if gc.Spec.ControllerName == routetable.ControllerName {
			classes[gc.Name] = gc
		}
	}
	gateways := map[types.NamespacedName]*gatewayv1.Gateway{}
	var ours []*gatewayv1.Gateway
	for _, gw := range in.Gateways {
		if classes[string(gw.Spec.GatewayClassName)] != nil {
			gateways[keyOf(gw)] = gw
			ours = append(ours, gw)
		}
	}
	alloc := allocate(r.AddressPool, ours)
	in.Gateways = withAllocation(in.Gateways, gateways, alloc)
	certs, err := r.certificates.certificates(ctx, ours)
	if err != nil {
		return reconcile.Result{}, err
	}
	in.Certificate = func(key types.NamespacedName) (routetable.Certificate, bool) {
		c, ok := certs[key]
		return c, ok
	}
	table := routetable.Build(in)

	var errs []error
	for _, gc := range classes {
		next := gc.DeepCopy()
		next.Status = classStatus(gc)
		errs = append(errs, r.patchStatus(ctx, gc, next, gc.Status, next.Status))
	}
	listeners := table.Listeners()
	for _, served := range table.Gateways() {
		gw := gateways[served.Gateway]
		next := gw.DeepCopy()
		next.Status = gatewayStatus(gw, served, listeners, r.unbound(), r.unassigned(alloc, served.Gateway))
		errs = append(errs, r.patchStatus(ctx, gw, next, gw.Status, next.Status))
	}
	routes := map[types.NamespacedName]*routetable.RouteStatus{}
	for _, st := range table.Routes() {
		routes[st.Route] = &st
	}
	for _, route := range in.Routes {
		errs = append(errs, r.writeRoute(ctx, route, routes[client.ObjectKeyFromObject(route)]))
	}
	errs = append(errs, r.writePools(ctx, pools, table.Routes(), in.ServiceExists))
	return reconcile.Result{}, errors.Join(errs...)
}

// withAllocation returns gateways with the Switchboard Gateways (ours) that have no
// spec.addresses replaced by copies whose status.addresses hold just their allocated
// address, if any: the route table reads the address a Gateway is served on from there.
func withAllocation(gateways []*gatewayv1.Gateway, ours map[types.NamespacedName]*gatewayv1.Gateway, alloc allocation) []*gatewayv1.Gateway {
	out := make([]*gatewayv1.Gateway, 0, len(gateways))
	for _, gw := range gateways {
		if ours[keyOf(gw)] == nil || len(gw.Spec.Addresses) > 0 {
			out = append(out, gw)
			continue
		}
		// A shallow copy: only the status addresses differ, and Build modifies nothing.
		allocated := *gw
		allocated.Status.Addresses = nil
		if ip, ok := alloc.addresses[keyOf(gw)]; ok {
			allocated.Status.Addresses = []gatewayv1.GatewayStatusAddress{{Type: ptr.To(gatewayv1.IPAddressType), Value: ip.String()}}
		}
		out = append(out, &allocated)
	}
	return out
}

// unbound returns what r.Binds reports, or nothing without it.
func (r *Reconciler) unbound() map[bindreport.Addr]string {
	if r.Binds == nil {
		return nil
	}
	return r.Binds.Unbound()
}

// unassigned says why the Gateway called key got no address from the pool, or returns ""
// when the route table's own message says enough.
func (r *Reconciler) unassigned(alloc allocation, key types.NamespacedName) string {
	switch {
	case r.AddressPool == nil:
		return "The Gateway has no spec.addresses and the manager has no address pool to allocate one from"
	case alloc.exhausted[key]:
		return fmt.Sprintf("Every address of the Gateway address pool %s is in use: delete a Gateway, give this one spec.addresses, or widen the manager's --gateway-address-pool",
			r.AddressPool)
	}
	return ""
}

// patchStatus merge-patches the status of obj to that of next unless old equals new,
// on the condition that obj is still the current version.
func (r *Reconciler) patchStatus(ctx context.Context, obj, next client.Object, old, new any) error {
	if equality.Semantic.DeepEqual(old, new) {
		return nil
	}
	patch := client.MergeFromWithOptions(obj, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, next, patch); err != nil {
		return r.writeError(ctx, obj, err)
	}
	log.FromContext(ctx).V(1).Info("Updated status", "kind", fmt.Sprintf("%T", obj), "object", client.ObjectKeyFromObject(obj))
	return nil
}

// writeRoute writes Switchboard's entries of one HTTPRoute's status.parents from st (nil
// when the route names none of Switchboard's Gateways), keeping the entries of other
// controllers.
func (r *Reconciler) writeRoute(ctx context.Context, route *gatewayv1.HTTPRoute, st *routetable.RouteStatus) error {
	parents := routeParents(route, st)
	if equality.Semantic.DeepEqual(route.Status.Parents, parents) {
		return nil
	}
	next := route.DeepCopy()
	next.Status.Parents = parents
	// An update, not a patch: status.parents is one list shared with other controllers.
	if err := r.Client.Status().Update(ctx, next); err != nil {
		return r.writeError(ctx, route, err)
	}
	log.FromContext(ctx).V(1).Info("Updated status", "kind", "HTTPRoute", "object", client.ObjectKeyFromObject(route))
	return nil
}

// writeError returns the error of a status write of obj, or nil when the object is gone
// or changed since it was read: either way, its watch event recomputes the status.
func (r *Reconciler) writeError(ctx context.Context, obj client.Object, err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		log.FromContext(ctx).V(1).Info("Skipped the status write of a stale object", "kind", fmt.Sprintf("%T", obj),
			"object", client.ObjectKeyFromObject(obj), "reason", apierrors.ReasonForError(err))
		return nil
	}
	return fmt.Errorf("write status of %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
}
