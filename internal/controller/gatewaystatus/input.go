package gatewaystatus

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/routing/strategies"
)

// ReadInput lists through reader, normally the manager's informer cache, everything
// routetable.Build reads: GatewayClasses, Gateways, HTTPRoutes and ReferenceGrants, and
// the labels of Namespaces, the existence of Services, the InferencePools and the existence and validity
// (strategies.Validate) of RoutingPolicies. A table built from it is the table the
// gateway serves from the same objects, but for the certificates of HTTPS listeners:
// Input.Certificate is left nil (no Secret holds one), because reading Secrets takes the
// uncached API reader; the Reconciler reads them itself. Route attachment does not
// depend on them. The Input's functions are not safe for concurrent use: it is meant for
// one Build at a time.
func ReadInput(ctx context.Context, reader client.Reader) (routetable.Input, error) {
	var (
		in         routetable.Input
		classes    gatewayv1.GatewayClassList
		gateways   gatewayv1.GatewayList
		routes     gatewayv1.HTTPRouteList
		grants     gatewayv1.ReferenceGrantList
		namespaces corev1.NamespaceList
		services   corev1.ServiceList
		pools      inferencev1.InferencePoolList
		policies   v1alpha1.RoutingPolicyList
	)
	for _, l := range []struct {
		what string
		list client.ObjectList
	}{
		{"gatewayclasses", &classes}, {"gateways", &gateways}, {"httproutes", &routes},
		{"referencegrants", &grants}, {"namespaces", &namespaces}, {"services", &services},
		{"inferencepools", &pools}, {"routingpolicies", &policies},
	} {
		if err := reader.List(ctx, l.list); err != nil {
			return in, fmt.Errorf("list %s: %w", l.what, err)
		}
	}
	in.Classes = pointers(classes.Items)
	in.Gateways = pointers(gateways.Items)
	in.Routes = pointers(routes.Items)
	in.ReferenceGrants = pointers(grants.Items)

	nsLabels := make(map[string]map[string]string, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		nsLabels[ns.Name] = ns.Labels
	}
	in.NamespaceLabels = func(ns string) map[string]string { return nsLabels[ns] }

	existing := make(map[types.NamespacedName]bool, len(services.Items))
	for i := range services.Items {
		existing[client.ObjectKeyFromObject(&services.Items[i])] = true
	}
	in.ServiceExists = func(key types.NamespacedName) bool { return existing[key] }

	byPool := make(map[types.NamespacedName]routetable.Pool, len(pools.Items))
	for i := range pools.Items {
		byPool[client.ObjectKeyFromObject(&pools.Items[i])] = routetable.PoolOf(&pools.Items[i])
	}
	in.Pool = func(key types.NamespacedName) (routetable.Pool, bool) {
		p, ok := byPool[key]
		return p, ok
	}

	byKey := make(map[types.NamespacedName]*v1alpha1.RoutingPolicy, len(policies.Items))
	for i := range policies.Items {
		byKey[client.ObjectKeyFromObject(&policies.Items[i])] = &policies.Items[i]
	}
	// validated memoises the validation of the policies rules reference, nil for valid.
	validated := map[types.NamespacedName]error{}
	in.Policy = func(key types.NamespacedName) (bool, error) {
		rp, found := byKey[key]
		if !found {
			return false, nil
		}
		err, done := validated[key]
		if !done {
			err = strategies.Validate(&rp.Spec)
			validated[key] = err
		}
		return true, err
	}
	return in, nil
}

// pointers returns pointers to the elements of items.
func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
