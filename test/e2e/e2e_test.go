package e2e

import (
	. "github.com/onsi/ginkgo/v2"
)

// The scenarios, in the order they run: later ones rely on the state earlier ones leave
// (a pod deleted, a gateway restarted). A failure does not skip the rest.
var _ = Describe("Switchboard", Ordered, ContinueOnFailure, func() {
	Context("routing strategies, seen in x-switchboard-endpoint", func() {
		It("round-robin cycles across the three pods", roundRobinCycles)
		It("session-affinity keeps each session on one pod", sessionsStick)
		It("least-request spreads a concurrent burst", leastRequestSpreadsBurst)
		It("random, least-kv-cache, least-latency, throughput and weighted serve a burst over the pods", metricStrategiesServe)
		It("a live change of spec.strategy changes routing of new requests", liveStrategySwitch)
		It("prefix-cache keeps each multi-turn conversation on one pod", conversationsStick)
		It("prefix-cache spreads a hot shared system prompt under concurrent load", hotPrefixSpreads)
	})

	Context("Gateway API routing", func() {
		It("a cross-namespace backendRef serves only once a ReferenceGrant permits it", tenantIsolation)
		It("backend weights split traffic 90/10, and weight 0 drains a backend", weightedSplit)
		It("a Gateway whose port or address the gateway cannot bind is not programmed until it can", unbindableGateways)
		It("an HTTPRoute to an InferencePool is served with the pool's policy and the pool's status names the Gateway", inferencePoolRoute)
	})

	Context("OpenAI APIs", func() {
		It("models, embeddings, responses and a multipart transcription work through the gateway with the OpenAI SDK", openAIAPIs)
		It("an adapter the engines list serves without a ModelAdapter, and an engine unloading it fails no request", engineListedAdapters)
	})

	Context("resources", func() {
		It("a ModelAdapter becomes READY, serves its name as a model and is gone after deletion", adapterLifecycle)
		It("a route to a missing RoutingPolicy reports ResolvedRefs=False and answers 500", brokenRoute)
	})

	Context("failures", func() {
		It("a session moves once, and stays, when its pod is deleted", sessionMovesOnce)
		It("an engine crash mid-stream fails that stream only", engineCrashMidStream)
		It("two gateway replicas serve the same route and place sessions alike", twoReplicas)
		It("a gateway restart fails requests only while it restarts", gatewayRestart)
		It("a standby manager takes over from a killed leader and unloads no adapter from a pod that stayed Ready", managerFailover)
		It("an API server restart under traffic fails no request, and the gateway catches up", apiServerRestart)
	})

	Context("soak (make soak)", func() {
		It("ten minutes of traffic under chaos", Label("soak"), soak)
	})
})
