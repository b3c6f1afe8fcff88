package policystatus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/gateway/routetable"
)

// ControllerName is the name of the RoutingPolicy status controller.
const ControllerName = "routingpolicy-status"

// cacheLagRetry is how soon a policy is reconciled again when the metadata cache has not
// yet caught up with the engine Pods the informer already shows.
const cacheLagRetry = 100 * time.Millisecond

// PodLister lists the engine pods the metadata cache knows; *cache.Manager is one.
type PodLister interface {
	// ListPods returns every known engine pod, routable or not.
	ListPods() []*cache.Pod
}

// Reconciler writes RoutingPolicy status. Client reads from the manager's informer cache
// and writes status; Pods is the metadata cache's view of engine pods, whose routability
// decides readyEndpoints. Both are required.
type Reconciler struct {
	Client client.Client
	Pods   PodLister
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=routingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=routingpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes;gateways;gatewayclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services;pods,verbs=get;list;watch

// SetupWithManager registers the reconciler with mgr. Besides RoutingPolicies it watches
// HTTPRoutes (mapped to the policies their ExtensionRef filters name, before and after the
// change), and Services and engine Pods (mapped to every policy in their namespace, since
// only routes there can send to them), and Gateways and GatewayClasses (mapped to every
// policy, since they decide which routes are attached).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.Pods == nil {
		return errors.New("routingpolicy status reconciler needs a Client and Pods")
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.RoutingPolicy{}).
		Watches(&gatewayv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(r.policiesOfRoute)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.policiesInNamespace)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.policiesInNamespace),
			builder.WithPredicates(cache.EnginePods)).
		Watches(&gatewayv1.Gateway{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies)).
		Watches(&gatewayv1.GatewayClass{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("register %s controller: %w", ControllerName, err)
	}
	return nil
}

// Reconcile recomputes the status of one RoutingPolicy and writes it if it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var rp v1alpha1.RoutingPolicy
	if err := r.Client.Get(ctx, req.NamespacedName, &rp); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	obs, err := r.observe(ctx, &rp)
	if err != nil {
		return reconcile.Result{}, err
	}
	next := rp.DeepCopy()
	next.Status = desiredStatus(&rp, obs)
	if !equality.Semantic.DeepEqual(rp.Status, next.Status) {
		// The controller owns the whole status, so a merge patch without a precondition
		// cannot overwrite anyone else's write and never conflicts.
		if err := r.Client.Status().Patch(ctx, next, client.MergeFrom(&rp)); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		log.FromContext(ctx).V(1).Info("Updated RoutingPolicy status",
			"attachedRoutes", next.Status.AttachedRoutes, "readyEndpoints", next.Status.ReadyEndpoints)
	}
	if obs.cacheBehind {
		return reconcile.Result{RequeueAfter: cacheLagRetry}, nil
	}
	return reconcile.Result{}, nil
}

// observation is what a policy's status is computed from.
type observation struct {
	// invalid is the Validate error, nil for a valid spec.
	invalid *InvalidSpecError
	// attachedRoutes is the number of attached HTTPRoutes referencing the policy.
	attachedRoutes int32
	// missingServices names the Services those routes' rules send to that do not exist.
	missingServices []string
	// readyEndpoints is the number of distinct routable pods behind those rules.
	readyEndpoints int32
	// cacheBehind reports that the metadata cache does not yet reflect the engine Pods
	// of the policy's namespace as the informer shows them.
	cacheBehind bool
}

// observe reads everything rp's status depends on.
func (r *Reconciler) observe(ctx context.Context, rp *v1alpha1.RoutingPolicy) (observation, error) {
	var obs observation
	if err := Validate(&rp.Spec); err != nil {
		var invalid *InvalidSpecError
		if !errors.As(err, &invalid) {
			return obs, err
		}
		obs.invalid = invalid
	}

	var classes gatewayv1.GatewayClassList
	if err := r.Client.List(ctx, &classes); err != nil {
		return obs, fmt.Errorf("list gatewayclasses: %w", err)
	}
	var gateways gatewayv1.GatewayList
	if err := r.Client.List(ctx, &gateways); err != nil {
		return obs, fmt.Errorf("list gateways: %w", err)
	}
	var routes gatewayv1.HTTPRouteList
	if err := r.Client.List(ctx, &routes, client.InNamespace(rp.Namespace)); err != nil {
		return obs, fmt.Errorf("list httproutes: %w", err)
	}
	input := routetable.Input{Classes: pointers(classes.Items), Gateways: pointers(gateways.Items)}

	// selectors are the selectors of the existing Services behind the policy's rules.
	var selectors []map[string]string
	seen := map[types.NamespacedName]bool{}
	for i := range routes.Items {
		route := &routes.Items[i]
		rules := rulesReferencing(route, rp.Name)
		if len(rules) == 0 || !attached(input, route) {
			continue
		}
		obs.attachedRoutes++
		for _, rule := range rules {
			for _, ref := range rule.BackendRefs {
				svc, ok := serviceRef(route.Namespace, ref.BackendRef)
				if !ok || seen[svc] {
					continue
				}
				seen[svc] = true
				var s corev1.Service
				if err := r.Client.Get(ctx, svc, &s); err != nil {
					if !apierrors.IsNotFound(err) {
						return obs, fmt.Errorf("get service %s: %w", svc, err)
					}
					obs.missingServices = append(obs.missingServices, svc.String())
					continue
				}
				if len(s.Spec.Selector) > 0 {
					selectors = append(selectors, s.Spec.Selector)
				}
			}
		}
	}

	known := map[endpoint.Key]*cache.Pod{}
	for _, p := range r.Pods.ListPods() {
		if p.Key.Namespace != rp.Namespace {
			continue
		}
		known[p.Key] = p
		if p.Routable() && selectedByAny(selectors, p.Labels) {
			obs.readyEndpoints++
		}
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(rp.Namespace), client.HasLabels{v1alpha1.LabelModel}); err != nil {
		return obs, fmt.Errorf("list pods: %w", err)
	}
	obs.cacheBehind = cacheBehind(pods.Items, known)
	return obs, nil
}

// desiredStatus returns rp's status for obs, keeping the transition times of conditions
// whose status does not change.
func desiredStatus(rp *v1alpha1.RoutingPolicy, obs observation) v1alpha1.RoutingPolicyStatus {
	st := *rp.Status.DeepCopy()
	st.ObservedGeneration = rp.Generation
	st.AttachedRoutes = obs.attachedRoutes
	st.ReadyEndpoints = obs.readyEndpoints
	set := func(typ string, ok bool, reason, message string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: rp.Generation,
		})
	}

	if obs.invalid != nil {
		set(v1alpha1.RoutingPolicyConditionAccepted, false, obs.invalid.Reason, obs.invalid.Message)
	} else {
		set(v1alpha1.RoutingPolicyConditionAccepted, true, v1alpha1.RoutingPolicyReasonAccepted, "The gateway can route with this policy")
	}

	if len(obs.missingServices) > 0 {
		set(v1alpha1.RoutingPolicyConditionResolvedRefs, false, v1alpha1.RoutingPolicyReasonBackendNotFound,
			"Backend Services not found: "+strings.Join(obs.missingServices, ", "))
	} else {
		set(v1alpha1.RoutingPolicyConditionResolvedRefs, true, v1alpha1.RoutingPolicyReasonResolvedRefs,
			"Every backend of the attached routes resolves")
	}

	switch {
	case obs.invalid != nil:
		// Requests on the attached rules are answered 500 while the spec is invalid.
		set(v1alpha1.RoutingPolicyConditionReady, false, obs.invalid.Reason, "The policy is not accepted: "+obs.invalid.Message)
	case obs.attachedRoutes == 0:
		set(v1alpha1.RoutingPolicyConditionReady, false, v1alpha1.RoutingPolicyReasonNotAttached,
			"No HTTPRoute attached to a Switchboard Gateway references this policy")
	case obs.readyEndpoints == 0:
		set(v1alpha1.RoutingPolicyConditionReady, false, v1alpha1.RoutingPolicyReasonNoReadyEndpoints,
			"The backends of the attached routes have no ready engine endpoint")
	default:
		set(v1alpha1.RoutingPolicyConditionReady, true, v1alpha1.RoutingPolicyReasonReady,
			fmt.Sprintf("Routing to %d ready endpoints on %d routes", obs.readyEndpoints, obs.attachedRoutes))
	}
	return st
}

// rulesReferencing returns the rules of route with an ExtensionRef filter naming the
// RoutingPolicy called policy in the route's namespace.
func rulesReferencing(route *gatewayv1.HTTPRoute, policy string) []*gatewayv1.HTTPRouteRule {
	var out []*gatewayv1.HTTPRouteRule
	for i := range route.Spec.Rules {
		if slices.Contains(policyNames(route.Spec.Rules[i].Filters), policy) {
			out = append(out, &route.Spec.Rules[i])
		}
	}
	return out
}

// policyNames returns the names of the RoutingPolicies filters refer to.
func policyNames(filters []gatewayv1.HTTPRouteFilter) []string {
	var out []string
	for _, f := range filters {
		ref := f.ExtensionRef
		if f.Type == gatewayv1.HTTPRouteFilterExtensionRef && ref != nil &&
			string(ref.Group) == routetable.PolicyGroup && string(ref.Kind) == routetable.PolicyKind {
			out = append(out, string(ref.Name))
		}
	}
	return out
}

// attached reports whether route attaches to at least one listener of a Switchboard
// Gateway, by the route table's own attachment rules.
func attached(in routetable.Input, route *gatewayv1.HTTPRoute) bool {
	in.Routes = []*gatewayv1.HTTPRoute{route}
	for _, l := range routetable.Build(in).Listeners() {
		if l.AttachedRoutes > 0 {
			return true
		}
	}
	return false
}

// serviceRef returns the Service a backendRef of a route in namespace ns names, if the
// gateway can send to it: a core Service with a port in the route's namespace. The
// gateway honours no ReferenceGrants, so a Service in another namespace is never used.
func serviceRef(ns string, ref gatewayv1.BackendRef) (types.NamespacedName, bool) {
	if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != "Service") || ref.Port == nil {
		return types.NamespacedName{}, false
	}
	if ref.Namespace != nil && string(*ref.Namespace) != ns {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}, true
}

// selectedByAny reports whether one of the Service selectors selects a pod with labels.
func selectedByAny(selectors []map[string]string, labels map[string]string) bool {
	for _, sel := range selectors {
		match := true
		for k, v := range sel {
			if got, ok := labels[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// cacheBehind reports whether the metadata cache's pods of one namespace (known) differ
// from the engine Pods the informer lists there in anything readyEndpoints depends on.
// Both are fed by the same watch, but by different controllers, so a Pod event can reach
// this reconciler before the cache has applied it.
func cacheBehind(pods []corev1.Pod, known map[endpoint.Key]*cache.Pod) bool {
	listed := 0
	for i := range pods {
		ep, isEngine, err := cache.EndpointFromPod(&pods[i])
		p, ok := known[endpoint.Key{Namespace: pods[i].Namespace, Name: pods[i].Name}]
		if err != nil || !isEngine {
			// The cache drops Pods that are not valid engine Pods.
			if ok {
				return true
			}
			continue
		}
		if !ok {
			return true
		}
		listed++
		if p.Address != ep.Address || p.Ready != ep.Ready || p.Terminating != ep.Terminating ||
			!maps.Equal(p.Labels, ep.Labels) {
			return true
		}
	}
	return listed != len(known)
}

// policiesOfRoute maps an HTTPRoute to the RoutingPolicies its rules name.
func (r *Reconciler) policiesOfRoute(_ context.Context, obj client.Object) []reconcile.Request {
	route, ok := obj.(*gatewayv1.HTTPRoute)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	seen := map[string]bool{}
	for _, rule := range route.Spec.Rules {
		for _, name := range policyNames(rule.Filters) {
			if !seen[name] {
				seen[name] = true
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: route.Namespace, Name: name}})
			}
		}
	}
	return out
}

// policiesInNamespace maps an object to every RoutingPolicy in its namespace.
func (r *Reconciler) policiesInNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.listPolicies(ctx, client.InNamespace(obj.GetNamespace()))
}

// allPolicies maps an object to every RoutingPolicy.
func (r *Reconciler) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.listPolicies(ctx)
}

// listPolicies returns a request for every RoutingPolicy the options select.
func (r *Reconciler) listPolicies(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	var list v1alpha1.RoutingPolicyList
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		log.FromContext(ctx).Error(err, "List RoutingPolicies to reconcile")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// pointers returns pointers to the elements of items.
func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
