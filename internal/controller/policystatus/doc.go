// Package policystatus writes the status of RoutingPolicies: the Accepted, ResolvedRefs
// and Ready conditions, status.attachedRoutes and status.readyEndpoints, which fill the
// ROUTES, ENDPOINTS and READY columns of `kubectl get rp`.
//
// Accepted says whether the gateway can build a router from the spec
// (strategies.Validate), catching what admission validation cannot: a strategy unknown to
// this build (UnknownStrategy) or parameters the algorithms reject (InvalidParameters),
// such as a weighted policy whose scorers all have weight 0. attachedRoutes counts the
// HTTPRoutes with a rule whose ExtensionRef filter names the policy that the route table
// (routetable.Build over gatewaystatus.ReadInput, as the gateway builds it) accepts on a
// listener of a Switchboard Gateway; readyEndpoints counts the distinct routable engine
// pods, as the metadata cache sees them, selected by the Services those rules send to as
// the table resolves them (in another namespace only where a ReferenceGrant permits).
// ResolvedRefs is False (BackendNotFound) while such a rule names a missing Service.
//
// The package owns the RoutingPolicy status subresource and nothing else. It does not
// write HTTPRoute or Gateway status (package gatewaystatus does) and does not route.
package policystatus
