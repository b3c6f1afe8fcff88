// Package e2e is Switchboard's end-to-end suite (DESIGN §8): it runs the real binaries —
// manager, gateway, metadata-service and engine-sim — as processes against a real API
// server (envtest), configures them the way an operator does, with Gateway API objects,
// RoutingPolicies and ModelAdapters, and drives them the way users do: with the official
// OpenAI Go SDK and the real kubectl.
//
// The package holds only tests. It does not test components in isolation (their packages
// do) and it never reads a process's memory: everything it checks is visible on the wire,
// in response headers such as x-switchboard-endpoint, in status, or on /metrics.
package e2e
