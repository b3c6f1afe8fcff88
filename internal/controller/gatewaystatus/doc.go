// Package gatewaystatus writes the Gateway API status of the objects Switchboard serves,
// and allocates the addresses of its Gateways.
//
// The statuses say what the gateway serves because they are computed by the same code
// from the same objects: ReadInput lists what routetable.Build reads, and every condition
// comes from the resulting table. It covers GatewayClasses whose spec.controllerName is
// routetable.ControllerName (Accepted); Gateways of those classes (Accepted, Programmed,
// status.addresses, and per listener supportedKinds, attachedRoutes and the Accepted,
// Programmed, ResolvedRefs and Conflicted conditions; an HTTPS listener's ResolvedRefs
// says whether its tls.certificateRefs resolve to kubernetes.io/tls Secrets the Gateway
// may use, and it is Programmed only with a usable certificate); and the status.parents
// entries of HTTPRoutes for parentRefs naming such Gateways (Accepted, ResolvedRefs, and
// PartiallyInvalid while some but not all rules answer 500).
//
// Each Gateway is served on addresses of its own: its spec.addresses (IPAddress only;
// another type is Accepted=False, reason UnsupportedAddress), or else one the reconciler
// allocates from an AddressPool and writes to status.addresses, where the gateway reads
// it back. Allocated addresses are sticky and never shared; a Gateway the pool has no
// address left for is Programmed=False, reason AddressNotAssigned. A Gateway whose
// address and port an older Gateway already serves on is Programmed=False, reason
// AddressNotUsable, and so is one whose address or port a gateway replica reports it
// cannot bind (package bindreport), with that listener Programmed=False, reason Pending.
//
// Secrets are watched metadata-only: the data of a Secret a listener names is read
// through the uncached API reader when its resourceVersion changes, and nothing is kept
// of Secrets no listener names.
//
// One reconciler recomputes every status on any change of the objects it reads; the
// work queue collapses bursts into one pass, and writes are skipped when nothing changed.
// HTTPRoute parents entries of other controllers are kept untouched, as the Gateway API
// requires. The package does not write RoutingPolicy status (package policystatus does)
// and does not configure the data plane, which reads the same objects itself.
package gatewaystatus
