package gatewaystatus

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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
// the labels of Namespaces, the existence of Services, the InferencePools (none without
// their CRD) and the existence and validity (strategies.Validate) of RoutingPolicies. A table built from it is the table the
// gateway serves from the same objects, but for the certificates of HTTPS listeners:
// Input.Certificate is left nil (no Secret holds one), because reading Secrets takes the
// uncached API reader; the Reconciler reads them itself. Route attachment does not
// depend on them. The Input's functions are not safe for concurrent use: it is meant for
// one Build at a time.
func ReadInput(ctx context.Context, reader client.Reader) (routetable.Input, error) {
	in, _, err := readInput(ctx, reader)
	return in, err
}

// readInput is ReadInput that also returns the InferencePools it read, none when the
// API server has no InferencePool CRD.
func readInput(ctx context.Context, reader client.Reader) (routetable.Input, []inferencev1.InferencePool, error) {
	var (
		in         routetable.Input
		classes    gatewayv1.GatewayClassList
		gateways   gatewayv1.GatewayList
		routes     gatewayv1.HTTPRouteList
		grants     gatewayv1.ReferenceGrantList
		namespaces corev1.NamespaceList
		services   corev1.ServiceList
		policies   v1alpha1.RoutingPolicyList
	)
	for _, l := range []struct {
		what string
		list client.ObjectList
	}{
		{"gatewayclasses", &classes}, {"gateways", &gateways}, {"httproutes", &routes},
		{"referencegrants", &grants}, {"namespaces", &namespaces}, {"services", &services},
		{"routingpolicies", &policies},
	} {
		if err := reader.List(ctx, l.list); err != nil {
			return in, nil, fmt.Errorf("list %s: %w", l.what, err)
		}
	}
	pools, err := listPools(ctx, reader)
	if err != nil {
		return in, nil, err
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

	byPool := make(map[types.NamespacedName]routetable.Pool, len(pools))
	for i := range pools {
		byPool[client.ObjectKeyFromObject(&pools[i])] = routetable.PoolOf(&pools[i])
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
	return in, pools, nil
}

// listPools lists the InferencePools through reader: none when the API server has no
// InferencePool CRD.
func listPools(ctx context.Context, reader client.Reader) ([]inferencev1.InferencePool, error) {
	var pools inferencev1.InferencePoolList
	if err := reader.List(ctx, &pools); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list inferencepools: %w", err)
	}
	return pools.Items, nil
}

// pointers returns pointers to the elements of items.
func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
