package endpoint

// Key identifies a pod that the gateway may send requests to.
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

// Endpoint is the immutable description of one pod the gateway may send requests to: an
// engine pod (BaseModel set), or in the gateway's cache any other pod, which a Service can
// select for plain Gateway API routing.
//
// Labels, NamedPorts and Adapters are shared with every holder of the value and MUST NOT be
// modified.
type Endpoint struct {
	// Key is the pod's namespace and name.
	Key Key
	// Address is the pod IP; empty while the pod has none.
	Address string
	// Port is the engine's serving port, which also serves /metrics: the
	// switchboard.dev/port label, or 8000. Requests through a Service go to the port the
	// Service resolves to instead.
	Port int32
	// NamedPorts maps the names of the pod's container ports to their numbers, for
	// Services whose targetPort is a name.
	NamedPorts map[string]int32
	// BaseModel is the value of the switchboard.dev/model label; empty for a pod that is
	// not an engine.
	BaseModel string
	// Engine is the engine type from the switchboard.dev/engine label.
	Engine Engine
	// Labels are the pod's labels, used to resolve Service selectors.
	Labels map[string]string
	// Ready reports whether the pod is Running and its Ready condition is true.
	Ready bool
	// Terminating reports whether the pod has a deletion timestamp.
	Terminating bool
	// Adapters are the names of the LoRA adapters the pod serves, sorted: in the cache,
	// those its engine lists, joined with ModelAdapter placement (see cache.Cache).
	Adapters []string
}

// IsEngine reports whether the pod is an engine pod (labelled switchboard.dev/model).
func (e *Endpoint) IsEngine() bool { return e.BaseModel != "" }

// Routable reports whether requests may be sent to the endpoint: it is ready, not
// terminating and has an address.
func (e *Endpoint) Routable() bool {
	return e.Ready && !e.Terminating && e.Address != ""
}
