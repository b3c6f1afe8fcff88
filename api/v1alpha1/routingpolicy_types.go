package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Strategy names a routing algorithm.
// +kubebuilder:validation:Enum=random;round-robin;least-request;least-kv-cache;least-latency;throughput;prefix-cache;session-affinity;weighted
type Strategy string

// Routing strategies. Every strategy that reads engine metrics treats a missing or stale
// snapshot as unknown and defers to the policy's fallback.
const (
	// StrategyRandom picks a uniformly random candidate.
	StrategyRandom Strategy = "random"
	// StrategyRoundRobin cycles through the candidates in a stable order.
	StrategyRoundRobin Strategy = "round-robin"
	// StrategyLeastRequest picks the candidate with the fewest in-flight requests.
	StrategyLeastRequest Strategy = "least-request"
	// StrategyLeastKVCache picks the candidate with the lowest KV-cache usage.
	StrategyLeastKVCache Strategy = "least-kv-cache"
	// StrategyLeastLatency picks the candidate with the lowest expected queue, prefill and
	// decode time for the request.
	StrategyLeastLatency Strategy = "least-latency"
	// StrategyThroughput picks the candidate with the least recent token throughput.
	StrategyThroughput Strategy = "throughput"
	// StrategyPrefixCache picks the candidate most likely to hold the prompt's prefix in its
	// KV cache, guarded against load imbalance.
	StrategyPrefixCache Strategy = "prefix-cache"
	// StrategySessionAffinity keeps requests carrying the same session header on one candidate.
	StrategySessionAffinity Strategy = "session-affinity"
	// StrategyWeighted sums the normalised scores of spec.scorers by weight.
	StrategyWeighted Strategy = "weighted"
)

// Scorer is one weighted term of a weighted strategy.
type Scorer struct {
	// Name is the strategy whose score is used. It MUST NOT be "weighted".
	// +required
	// +kubebuilder:validation:XValidation:rule="self != 'weighted'",message="scorers[].name must not be weighted"
	Name Strategy `json:"name"`

	// Weight multiplies the scorer's score, normalised to [0,1], in the weighted sum.
	// Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Weight *int32 `json:"weight,omitempty"`
}

// PrefixCacheConfig tunes the prefix-cache strategy.
type PrefixCacheConfig struct {
	// BlockSize is the number of tokens hashed together as one prefix block. Smaller blocks
	// match shorter shared prefixes at the cost of a larger index and more hashing; at
	// least 4 tokens (16 bytes of prompt text), a prompt's hashes take at most half its
	// size. Defaults to 16.
	// +optional
	// +kubebuilder:default=16
	// +kubebuilder:validation:Minimum=4
	// +kubebuilder:validation:Maximum=1024
	BlockSize *int32 `json:"blockSize,omitempty"`

	// MaxBlocksPerEndpoint bounds the prefix index kept for each endpoint; the least recently
	// used blocks are forgotten first. The index holds no more than the engine's own KV
	// cache either, where the engine reports its size (vllm:cache_config_info). Each block
	// takes about 64 bytes of the gateway's memory, so the most, 4194304, is 256 MiB per
	// endpoint; the gateway also bounds all its indexes together
	// (--prefix-index-memory-bytes), forgetting the least recently learnt blocks beyond.
	// Defaults to 65536.
	// +optional
	// +kubebuilder:default=65536
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4194304
	MaxBlocksPerEndpoint *int32 `json:"maxBlocksPerEndpoint,omitempty"`

	// MinMatchRatio is the fraction of the prompt's blocks, written as a decimal string in
	// [0, 1] such as "0.5", that an endpoint must already hold for its match to count; a
	// shorter match is predicted as a full prefill, so the request goes where its first
	// token comes soonest regardless of the match. Defaults to "0".
	// +optional
	// +kubebuilder:default="0"
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]+)?|1(\.0+)?)$`
	// +kubebuilder:validation:MaxLength=16
	MinMatchRatio *string `json:"minMatchRatio,omitempty"`

	// LoadImbalanceThreshold is a hard guard on top of the prediction of time to first
	// token: an endpoint that the request would put more than this many in-flight
	// requests ahead of the idlest candidate is left out of the decision, whatever its
	// prefix match, so no endpoint runs more than this many ahead. The prediction itself
	// weighs the wait behind an engine's queue against the prefill a match saves, so the
	// guard acts where the prediction cannot: before an engine was ever seen queueing, when
	// its slot count is unknown. Defaults to 8.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	LoadImbalanceThreshold *int32 `json:"loadImbalanceThreshold,omitempty"`
}

// SessionAffinityConfig tunes the session-affinity strategy.
type SessionAffinityConfig struct {
	// Header is the request header whose value identifies a session. A request without it is
	// routed by the fallback strategy. Defaults to "x-session-id".
	// +optional
	// +kubebuilder:default="x-session-id"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	Header *string `json:"header,omitempty"`

	// TTL is how long a session stays pinned to its endpoint after its last request. Defaults
	// to 30m.
	// +optional
	// +kubebuilder:default="30m"
	TTL *metav1.Duration `json:"ttl,omitempty"`
}

// RetryConfig says how the gateway retries a request that could not reach an endpoint.
type RetryConfig struct {
	// Attempts is the number of further endpoints tried after a connection failure or a 5xx
	// answer, before any response byte was sent to the client. A request is never retried
	// once the response has started; the last attempt's 5xx answer is sent to the client as
	// is. Defaults to 2, as when spec.retry is absent.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	Attempts *int32 `json:"attempts,omitempty"`
}

// OutlierDetectionConfig says when the gateway stops sending requests to an endpoint that
// keeps failing (passive health checking, with Envoy's consecutive-5xx semantics).
type OutlierDetectionConfig struct {
	// ConsecutiveFailures is the number of failures in a row after which an endpoint is
	// ejected. A failure is a 5xx answer that arrives before any response byte was sent to
	// the client, a failed connection, or a round trip that fails before the response
	// headers; any other answer resets the count. The count is kept per pod and shared by
	// every route. Defaults to 5.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	ConsecutiveFailures *int32 `json:"consecutiveFailures,omitempty"`

	// BaseEjectionTime is how long an endpoint stays ejected the first time. Each further
	// ejection lasts this long times the number of times the endpoint was ejected, up to
	// the larger of this and 5m; the count decays by one per BaseEjectionTime the endpoint
	// stays in. Between 1s and 1h. Defaults to 30s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="spec.outlierDetection.baseEjectionTime must be between 1s and 1h"
	BaseEjectionTime *metav1.Duration `json:"baseEjectionTime,omitempty"`

	// MaxEjectionPercent is the largest share, in percent rounded down, of a backend's
	// candidate endpoints for a request that may be left out for being ejected. When more
	// are ejected, those whose ejection ends soonest stay in, so 0 disables ejection and a
	// backend with a single endpoint never loses it. Defaults to 50.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxEjectionPercent *int32 `json:"maxEjectionPercent,omitempty"`
}

// QueueConfig says how long a request waits for capacity. It applies when the gateway
// caps the requests in flight per endpoint (--max-in-flight-per-endpoint) and every
// candidate of a request is at the cap.
type QueueConfig struct {
	// MaxWait is how long a request may wait for an endpoint to free up before the gateway
	// answers 503 with a Retry-After header. Between 1ms and 1h. Defaults to the gateway's
	// --max-queue-wait (30s unless set).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('1h')",message="spec.queue.maxWait must be between 1ms and 1h"
	MaxWait *metav1.Duration `json:"maxWait,omitempty"`
}

// RoutingPolicySpec says how the gateway picks an endpoint.
// +kubebuilder:validation:XValidation:rule="self.strategy != 'weighted' || (has(self.scorers) && size(self.scorers) > 0)",message="spec.scorers must be set when spec.strategy is weighted"
// +kubebuilder:validation:XValidation:rule="self.strategy == 'weighted' || !has(self.scorers) || size(self.scorers) == 0",message="spec.scorers may only be set when spec.strategy is weighted"
// +kubebuilder:validation:XValidation:rule="!has(self.fallback) || self.fallback != 'weighted'",message="spec.fallback must not be weighted"
type RoutingPolicySpec struct {
	// Strategy is the routing algorithm applied to every request on the routes that reference
	// this policy.
	// +required
	Strategy Strategy `json:"strategy"`

	// Scorers are the weighted terms of the weighted strategy. They MUST be set when strategy
	// is weighted and MUST NOT be set otherwise. Names must be unique.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Scorers []Scorer `json:"scorers,omitempty"`

	// PrefixCache tunes the prefix-cache strategy, also when it is used as a scorer.
	// +optional
	PrefixCache *PrefixCacheConfig `json:"prefixCache,omitempty"`

	// SessionAffinity tunes the session-affinity strategy, also when it is used as a scorer.
	// +optional
	SessionAffinity *SessionAffinityConfig `json:"sessionAffinity,omitempty"`

	// Fallback is the strategy used when the main one cannot decide, for example because
	// engine metrics are missing or stale. It MUST NOT be weighted. Defaults to least-request.
	// +optional
	// +kubebuilder:default=least-request
	Fallback *Strategy `json:"fallback,omitempty"`

	// AllowStrategyOverride lets a request choose its strategy with the x-routing-strategy
	// header. When false the header is ignored. Defaults to false.
	// +optional
	AllowStrategyOverride *bool `json:"allowStrategyOverride,omitempty"`

	// Retry says how connection failures and 5xx answers are retried on other endpoints.
	// +optional
	Retry *RetryConfig `json:"retry,omitempty"`

	// OutlierDetection says when an endpoint that keeps failing is ejected from the
	// candidates for a while. When unset, the defaults of its fields apply.
	// +optional
	OutlierDetection *OutlierDetectionConfig `json:"outlierDetection,omitempty"`

	// Queue says how long a request waits when every endpoint it may go to is at the
	// gateway's per-endpoint concurrency cap.
	// +optional
	Queue *QueueConfig `json:"queue,omitempty"`
}

// RoutingPolicy condition types.
const (
	// RoutingPolicyConditionAccepted is True when the spec is valid and the policy is in use by
	// the gateway. Reasons: Accepted, Pending, UnknownStrategy, InvalidParameters.
	RoutingPolicyConditionAccepted = "Accepted"
	// RoutingPolicyConditionResolvedRefs is True when every route referencing the policy
	// resolves its backends. Reasons: ResolvedRefs, Pending, BackendNotFound.
	RoutingPolicyConditionResolvedRefs = "ResolvedRefs"
	// RoutingPolicyConditionReady is True when the policy is accepted, attached to at least
	// one accepted HTTPRoute and has at least one ready endpoint. Reasons: Ready, Pending,
	// NotAttached, NoReadyEndpoints.
	RoutingPolicyConditionReady = "Ready"
)

// RoutingPolicy condition reasons.
const (
	// RoutingPolicyReasonPending means no controller has processed the policy yet.
	RoutingPolicyReasonPending = "Pending"
	// RoutingPolicyReasonAccepted means the spec is valid.
	RoutingPolicyReasonAccepted = "Accepted"
	// RoutingPolicyReasonUnknownStrategy means a strategy is not known to this gateway.
	RoutingPolicyReasonUnknownStrategy = "UnknownStrategy"
	// RoutingPolicyReasonInvalidParameters means parameters are invalid in a way admission
	// validation cannot detect.
	RoutingPolicyReasonInvalidParameters = "InvalidParameters"
	// RoutingPolicyReasonResolvedRefs means every backend of the attached routes resolves.
	RoutingPolicyReasonResolvedRefs = "ResolvedRefs"
	// RoutingPolicyReasonBackendNotFound means an attached route names a missing Service.
	RoutingPolicyReasonBackendNotFound = "BackendNotFound"
	// RoutingPolicyReasonReady means the policy routes traffic to at least one endpoint.
	RoutingPolicyReasonReady = "Ready"
	// RoutingPolicyReasonNotAttached means no accepted HTTPRoute references the policy.
	RoutingPolicyReasonNotAttached = "NotAttached"
	// RoutingPolicyReasonNoReadyEndpoints means the attached routes have no ready endpoint.
	RoutingPolicyReasonNoReadyEndpoints = "NoReadyEndpoints"
)

// RoutingPolicyStatus is the observed state of a RoutingPolicy.
type RoutingPolicyStatus struct {
	// ObservedGeneration is the metadata.generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are Accepted, ResolvedRefs and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// AttachedRoutes is the number of HTTPRoutes whose rules reference this policy.
	// +optional
	AttachedRoutes int32 `json:"attachedRoutes"`

	// ReadyEndpoints is the number of ready engine endpoints behind the attached routes.
	// +optional
	ReadyEndpoints int32 `json:"readyEndpoints"`
}

// RoutingPolicy says how the gateway picks an endpoint for requests on the HTTPRoute rules that
// reference it through an ExtensionRef filter.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rp,categories=switchboard
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`
// +kubebuilder:printcolumn:name="Routes",type=integer,JSONPath=`.status.attachedRoutes`
// +kubebuilder:printcolumn:name="Endpoints",type=integer,JSONPath=`.status.readyEndpoints`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RoutingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired routing behaviour.
	// +required
	Spec RoutingPolicySpec `json:"spec"`

	// Status is the observed state, written by the manager.
	// +optional
	// +kubebuilder:default={attachedRoutes: 0, readyEndpoints: 0, conditions: {{type: "Accepted", status: "Unknown", reason: "Pending", message: "Waiting for controller", lastTransitionTime: "1970-01-01T00:00:00Z"}}}
	Status RoutingPolicyStatus `json:"status,omitempty"`
}

// RoutingPolicyList is a list of RoutingPolicy.
// +kubebuilder:object:root=true
type RoutingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RoutingPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RoutingPolicy{}, &RoutingPolicyList{})
}
