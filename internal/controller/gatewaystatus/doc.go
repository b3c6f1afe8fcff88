// Package gatewaystatus writes the Gateway API status of the objects Switchboard serves:
// GatewayClasses whose spec.controllerName is routetable.ControllerName (Accepted),
// Gateways of those classes (Accepted, Programmed, and per listener supportedKinds,
// attachedRoutes and the Accepted, Programmed and ResolvedRefs conditions), and the
// status.parents entries of HTTPRoutes for parentRefs naming such Gateways (Accepted,
// ResolvedRefs, and PartiallyInvalid when some rules carry filters the gateway cannot
// honour).
//
// Attachment follows the route table the gateway serves from (routetable.Build), so the
// status says what the data plane does. A rule whose ExtensionRef names a missing or
// invalid RoutingPolicy, or an object of another kind, makes ResolvedRefs False (reasons
// RoutingPolicyNotFound, InvalidRoutingPolicy, InvalidKind): the gateway answers 500 on
// that rule. A backendRef to a missing Service gives BackendNotFound.
//
// One reconciler recomputes every status on any change of the objects it reads; the
// work queue collapses bursts into one pass, and writes are skipped when nothing changed.
// HTTPRoute parents entries of other controllers are kept untouched, as the Gateway API
// requires. The package does not write RoutingPolicy status (package policystatus does)
// and does not configure the data plane, which reads the same objects itself.
package gatewaystatus
