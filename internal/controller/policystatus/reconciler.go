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
	"github.com/switchboard-llm/switchboard/internal/controller/gatewaystatus"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/routing/strategies"
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
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes;gateways;gatewayclasses;referencegrants,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services;pods;namespaces,verbs=get;list;watch

// SetupWithManager registers the reconciler with mgr. Besides RoutingPolicies it watches
// HTTPRoutes (mapped to the policies their ExtensionRef filters name, before and after the
// change), and Services and engine Pods (mapped to every policy whose routes can send to
// them: those in their namespace and in the namespaces a ReferenceGrant there admits),
// and Gateways, GatewayClasses, Namespaces and ReferenceGrants (mapped to every policy,
// since they decide which routes are attached and which backends resolve).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.Pods == nil {
		return errors.New("routingpolicy status reconciler needs a Client and Pods")
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.RoutingPolicy{}).
		Watches(&gatewayv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(r.policiesOfRoute)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.policiesReaching)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.policiesReaching),
			builder.WithPredicates(cache.EnginePods)).
		Watches(&gatewayv1.Gateway{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies)).
		Watches(&gatewayv1.GatewayClass{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies)).
		Watches(&gatewayv1.ReferenceGrant{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies)).
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
	invalid *strategies.InvalidSpecError
	// attachedRoutes is the number of attached HTTPRoutes referencing the policy.
	attachedRoutes int32
	// missingServices names the Services those routes' rules send to that do not exist
	// (BackendNotFound), in the route's namespace or, granted, another.
	missingServices []string
	// readyEndpoints is the number of distinct routable pods behind those rules' usable
	// backends.
	readyEndpoints int32
	// cacheBehind reports that the metadata cache does not yet reflect the engine Pods
	// of the backends' namespaces as the informer shows them.
	cacheBehind bool
}

// observe reads everything rp's status depends on.
func (r *Reconciler) observe(ctx context.Context, rp *v1alpha1.RoutingPolicy) (observation, error) {
	var obs observation
	if err := strategies.Validate(&rp.Spec); err != nil {
		var invalid *strategies.InvalidSpecError
		if !errors.As(err, &invalid) {
			return obs, err
		}
		obs.invalid = invalid
	}

	in, err := gatewaystatus.ReadInput(ctx, r.Client)
	if err != nil {
		return obs, err
	}
	// Only routes in the policy's namespace can apply it; the others do not change
	// whether these attach or what they send to.
	in.Routes = slices.DeleteFunc(in.Routes, func(route *gatewayv1.HTTPRoute) bool { return route.Namespace != rp.Namespace })

	// services are the usable backends of the policy's attached rules, as the gateway
	// resolves them: in the route's namespace or, where a ReferenceGrant permits, another.
	key := client.ObjectKeyFromObject(rp)
	var services []types.NamespacedName
	seen := map[types.NamespacedName]bool{}
	missing := map[types.NamespacedName]bool{}
	for _, st := range routetable.Build(in).Routes() {
		if !slices.ContainsFunc(st.Parents, func(p routetable.ParentStatus) bool { return p.Accepted }) {
			continue
		}
		applied := false
		for _, rule := range st.Compiled {
			if rule.Policy == nil || *rule.Policy != key {
				continue
			}
			applied = true
			for _, b := range rule.Backends {
				if !seen[b.Service] {
					seen[b.Service] = true
					services = append(services, b.Service)
				}
			}
			for _, rb := range rule.RejectedBackends {
				if rb.Reason == gatewayv1.RouteReasonBackendNotFound && !missing[rb.Target] {
					missing[rb.Target] = true
					obs.missingServices = append(obs.missingServices, rb.Target.String())
				}
			}
		}
		if applied {
			obs.attachedRoutes++
		}
	}

	// selectors are the selectors of those Services, by namespace.
	selectors := map[string][]map[string]string{}
	for _, svc := range services {
		var s corev1.Service
		if err := r.Client.Get(ctx, svc, &s); err != nil {
			if !apierrors.IsNotFound(err) {
				return obs, fmt.Errorf("get service %s: %w", svc, err)
			}
			// Deleted since the table was built; its event reconciles again.
			obs.missingServices = append(obs.missingServices, svc.String())
			continue
		}
		if len(s.Spec.Selector) > 0 {
			selectors[svc.Namespace] = append(selectors[svc.Namespace], s.Spec.Selector)
		}
	}

	known := map[endpoint.Key]*cache.Pod{}
	for _, p := range r.Pods.ListPods() {
		sels, ok := selectors[p.Key.Namespace]
		if !ok {
			continue
		}
		known[p.Key] = p
		if p.Routable() && selectedByAny(sels, p.Labels) {
			obs.readyEndpoints++
		}
	}
	var listed []corev1.Pod
	for _, ns := range slices.Sorted(maps.Keys(selectors)) {
		var pods corev1.PodList
		if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{v1alpha1.LabelModel}); err != nil {
			return obs, fmt.Errorf("list pods in %s: %w", ns, err)
		}
		listed = append(listed, pods.Items...)
	}
	obs.cacheBehind = cache.PodsBehind(listed, known)
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

// policiesReaching maps a Service or Pod to every RoutingPolicy whose routes can send to
// it: the policies in its namespace and in every namespace whose HTTPRoutes a
// ReferenceGrant there lets reference Services.
func (r *Reconciler) policiesReaching(ctx context.Context, obj client.Object) []reconcile.Request {
	namespaces := []string{obj.GetNamespace()}
	var grants gatewayv1.ReferenceGrantList
	if err := r.Client.List(ctx, &grants, client.InNamespace(obj.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "List ReferenceGrants to reconcile", "namespace", obj.GetNamespace())
	}
	for _, g := range grants.Items {
		if !slices.ContainsFunc(g.Spec.To, func(to gatewayv1.ReferenceGrantTo) bool { return to.Group == "" && to.Kind == "Service" }) {
			continue
		}
		for _, from := range g.Spec.From {
			if from.Group == gatewayv1.GroupName && from.Kind == "HTTPRoute" && !slices.Contains(namespaces, string(from.Namespace)) {
				namespaces = append(namespaces, string(from.Namespace))
			}
		}
	}
	var out []reconcile.Request
	for _, ns := range namespaces {
		out = append(out, r.listPolicies(ctx, client.InNamespace(ns))...)
	}
	return out
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
