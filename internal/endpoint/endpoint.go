package endpoint

// Key identifies a pod that serves as an engine endpoint.
type Key struct {
	// Namespace is the pod's namespace.
	Namespace string
	// Name is the pod's name.
	Name string
}

// String returns the key as "namespace/name", the form used in the
// x-switchboard-endpoint response header.
func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Engine names the inference engine running in a pod; it selects the metric names scraped.
type Engine string

// Engines recognised through the switchboard.dev/engine pod label.
const (
	// EngineVLLM is vLLM, the default when the label is absent.
	EngineVLLM Engine = "vllm"
	// EngineSGLang is SGLang.
	EngineSGLang Engine = "sglang"
)

// Endpoint is the immutable description of one engine pod.
//
// Labels and Adapters are shared with every holder of the value and MUST NOT be modified.
type Endpoint struct {
	// Key is the pod's namespace and name.
	Key Key
	// Address is the pod IP; empty while the pod has none.
	Address string
	// Port is the serving port, which also serves /metrics.
	Port int32
	// BaseModel is the value of the switchboard.dev/model label.
	BaseModel string
	// Engine is the engine type from the switchboard.dev/engine label.
	Engine Engine
	// Labels are the pod's labels, used to resolve Service selectors.
	Labels map[string]string
	// Ready reports whether the pod is Running and its Ready condition is true.
	Ready bool
	// Terminating reports whether the pod has a deletion timestamp.
	Terminating bool
	// Adapters are the names of LoRA adapters loaded on this pod, sorted.
	Adapters []string
}

// Routable reports whether requests may be sent to the endpoint: it is ready, not
// terminating and has an address.
func (e *Endpoint) Routable() bool {
	return e.Ready && !e.Terminating && e.Address != ""
}
