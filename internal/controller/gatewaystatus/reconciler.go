package gatewaystatus

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/gateway/routetable"
)

// ControllerName is the name of the Gateway API status controller.
const ControllerName = "gateway-api-status"

// everything is the one request the reconciler works on: any change recomputes all.
var everything = reconcile.Request{NamespacedName: types.NamespacedName{Name: "switchboard-gateway-api"}}

// Reconciler writes the status of Switchboard's GatewayClasses, Gateways and the
// HTTPRoutes attached to them. Client reads from the manager's informer cache and writes
// status; it is required.
type Reconciler struct {
	Client client.Client
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses;gateways;httproutes,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses/status;gateways/status;httproutes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=routingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch

// SetupWithManager registers the reconciler with mgr. It watches GatewayClasses,
// Gateways, HTTPRoutes, RoutingPolicies and Services; every event enqueues the same
// request, so bursts collapse into one recomputation.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		return errors.New("gateway status reconciler needs a Client")
	}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{everything}
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&gatewayv1.GatewayClass{}, all).
		Watches(&gatewayv1.Gateway{}, all).
		Watches(&gatewayv1.HTTPRoute{}, all).
		Watches(&v1alpha1.RoutingPolicy{}, all).
		Watches(&corev1.Service{}, all).
		Complete(r)
	if err != nil {
		return fmt.Errorf("register %s controller: %w", ControllerName, err)
	}
	return nil
}

// Reconcile recomputes the status of every GatewayClass, Gateway and HTTPRoute Switchboard
// is responsible for and writes those that changed. The request is ignored.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	w, err := r.read(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	var errs []error
	for _, gc := range w.classes {
		errs = append(errs, r.writeClass(ctx, gc))
	}
	for _, gw := range w.gateways {
		errs = append(errs, r.writeGateway(ctx, gw, w))
	}
	for i := range w.routes {
		errs = append(errs, r.writeRoute(ctx, client.ObjectKeyFromObject(w.routes[i]), w))
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// world is the state the statuses are computed from.
type world struct {
	// classes are the GatewayClasses of ControllerName.
	classes []*gatewayv1.GatewayClass
	// gateways are the Gateways of those classes.
	gateways []*gatewayv1.Gateway
	// routes are all HTTPRoutes.
	routes []*gatewayv1.HTTPRoute
	// table is the route table built from them, as the gateway builds it.
	table *routetable.Table
	// reader resolves RoutingPolicies and Services.
	reader client.Reader
}

// gateway returns the Switchboard Gateway called key.
func (w *world) gateway(key types.NamespacedName) (*gatewayv1.Gateway, bool) {
	for _, gw := range w.gateways {
		if gw.Namespace == key.Namespace && gw.Name == key.Name {
			return gw, true
		}
	}
	return nil, false
}

// read lists the objects the statuses depend on.
func (r *Reconciler) read(ctx context.Context) (*world, error) {
	w := &world{reader: r.Client}
	var classes gatewayv1.GatewayClassList
	if err := r.Client.List(ctx, &classes); err != nil {
		return nil, fmt.Errorf("list gatewayclasses: %w", err)
	}
	ours := map[string]bool{}
	for i := range classes.Items {
		if gc := &classes.Items[i]; gc.Spec.ControllerName == routetable.ControllerName {
			w.classes = append(w.classes, gc)
			ours[gc.Name] = true
		}
	}
	var gateways gatewayv1.GatewayList
	if err := r.Client.List(ctx, &gateways); err != nil {
		return nil, fmt.Errorf("list gateways: %w", err)
	}
	for i := range gateways.Items {
		if gw := &gateways.Items[i]; ours[string(gw.Spec.GatewayClassName)] {
			w.gateways = append(w.gateways, gw)
		}
	}
	var routes gatewayv1.HTTPRouteList
	if err := r.Client.List(ctx, &routes); err != nil {
		return nil, fmt.Errorf("list httproutes: %w", err)
	}
	for i := range routes.Items {
		w.routes = append(w.routes, &routes.Items[i])
	}
	// The gateway builds its table from classes, Gateways and routes only (no
	// ReferenceGrants, no namespace labels); the status must describe that table.
	w.table = routetable.Build(routetable.Input{Classes: w.classes, Gateways: w.gateways, Routes: w.routes})
	return w, nil
}

// writeClass writes the status of one of Switchboard's GatewayClasses.
func (r *Reconciler) writeClass(ctx context.Context, gc *gatewayv1.GatewayClass) error {
	next := gc.DeepCopy()
	next.Status = classStatus(gc)
	return r.patchStatus(ctx, gc, next, gc.Status, next.Status)
}

// writeGateway writes the status of one of Switchboard's Gateways.
func (r *Reconciler) writeGateway(ctx context.Context, gw *gatewayv1.Gateway, w *world) error {
	next := gw.DeepCopy()
	next.Status = gatewayStatus(gw, w.table)
	return r.patchStatus(ctx, gw, next, gw.Status, next.Status)
}

// patchStatus merge-patches the status of obj to that of next unless old equals new.
// Switchboard owns the whole status of its classes and Gateways, so the patch carries no
// precondition and cannot overwrite anyone else's write.
func (r *Reconciler) patchStatus(ctx context.Context, obj, next client.Object, old, new any) error {
	if equality.Semantic.DeepEqual(old, new) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, next, client.MergeFrom(obj)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch status of %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	log.FromContext(ctx).V(1).Info("Updated status", "kind", fmt.Sprintf("%T", obj), "object", client.ObjectKeyFromObject(obj))
	return nil
}

// writeRoute writes Switchboard's entries of one HTTPRoute's status.parents. Other
// controllers own the other entries, so it writes with optimistic concurrency and, on a
// conflict, reads the route again and recomputes.
func (r *Reconciler) writeRoute(ctx context.Context, key types.NamespacedName, w *world) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var route gatewayv1.HTTPRoute
		if err := r.Client.Get(ctx, key, &route); err != nil {
			return err
		}
		parents, err := routeParents(ctx, &route, w)
		if err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(route.Status.Parents, parents) {
			return nil
		}
		route.Status.Parents = parents
		if err := r.Client.Status().Update(ctx, &route); err != nil {
			return err
		}
		log.FromContext(ctx).V(1).Info("Updated HTTPRoute status", "httproute", key)
		return nil
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update status of httproute %s: %w", key, err)
	}
	return nil
}
