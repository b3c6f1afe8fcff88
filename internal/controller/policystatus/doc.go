// Package policystatus writes the status of RoutingPolicies: the Accepted, ResolvedRefs
// and Ready conditions, status.attachedRoutes and status.readyEndpoints, which fill the
// ROUTES, ENDPOINTS and READY columns of `kubectl get rp`.
//
// Accepted says whether the gateway can build a router from the spec (Validate), catching
// what admission validation cannot: a strategy unknown to this build (UnknownStrategy) or
// parameters the algorithms reject (InvalidParameters), such as a weighted policy whose
// scorers all have weight 0. attachedRoutes counts the HTTPRoutes, attached to a listener
// of a Switchboard Gateway, with a rule whose ExtensionRef filter names the policy;
// readyEndpoints counts the distinct routable engine pods, as the metadata cache sees
// them, selected by the Services those rules send to. ResolvedRefs is False
// (BackendNotFound) while such a rule names a missing Service.
//
// The package owns the RoutingPolicy status subresource and nothing else. It does not
// write HTTPRoute or Gateway status (package gatewaystatus does) and does not route.
package policystatus
