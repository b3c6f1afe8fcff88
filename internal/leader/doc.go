// Package leader elects one replica among several through a coordination.k8s.io Lease,
// for a component that must be active on one replica at a time: the gateway's ext_proc
// endpoint picker, whose reservations count the load of its own process only, so that
// the Endpoint Picker Protocol's readiness sends Envoy to the leader alone.
//
// It owns only the election. What a replica does while it leads is its caller's
// business; the Lease is the only object it writes.
package leader
