package endpoint

import (
	"cmp"
	"strconv"
)

// Key identifies an endpoint the gateway may send requests to: a pod's own endpoint
// (Port 0), or a rank of the pod, the engine server it runs on one of an InferencePool's
// targetPorts (Port that port). Each rank is an endpoint of its own, with its own
// metrics, load counters, model listing and routing state.
type Key struct {
	// Namespace is the pod's namespace.
	Namespace string
	// Name is the pod's name.
	Name string
	// Port is 0 for the pod's own endpoint, on its engine port (the switchboard.dev/port
	// label); otherwise the port of the rank. A pool's targetPort equal to the pod's
	// engine port is the pod's own endpoint, not a rank.
	Port int32
}

// String returns the key as "namespace/name", or "namespace/name:port" for a rank: the
// form used in the x-switchboard-endpoint response header.
func (k Key) String() string {
	if k.Port == 0 {
		return k.Namespace + "/" + k.Name
	}
	return k.Namespace + "/" + k.Name + ":" + strconv.Itoa(int(k.Port))
}

// Compare orders keys by namespace, name, then port (a pod's own endpoint before its
// ranks), returning -1, 0 or +1 as cmp.Compare does.
func (k Key) Compare(o Key) int {
	return cmp.Or(cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name), cmp.Compare(k.Port, o.Port))
}

// IsRank reports whether k names a rank rather than a pod's own endpoint.
func (k Key) IsRank() bool { return k.Port != 0 }

// Engine names the inference engine running in a pod; it selects the metric names scraped.
type Engine string

// Engines recognised through the switchboard.dev/engine pod label.
const (
	// EngineVLLM is vLLM, the default when the label is absent.
	EngineVLLM Engine = "vllm"
	// EngineSGLang is SGLang.
	EngineSGLang Engine = "sglang"
)

// Endpoint is the immutable description of one endpoint the gateway may send requests to:
// an engine pod (BaseModel set), or in the gateway's cache any other pod, which a Service
// can select for plain Gateway API routing, or a rank of a pod (Key.Port set), which only
// an InferencePool selects. A rank carries its pod's description with Port its own.
//
// Labels, NamedPorts and Adapters are shared with every holder of the value and MUST NOT be
// modified.
type Endpoint struct {
	// Key is the pod's namespace and name, and a rank's port.
	Key Key
	// Address is the pod IP; empty while the pod has none.
	Address string
	// Port is the engine's serving port, which also serves /metrics: the
	// switchboard.dev/port label, or 8000; a rank's Key.Port. Requests through a Service
	// go to the port the Service resolves to instead.
	Port int32
	// NamedPorts maps the names of the pod's container ports to their numbers, for
	// Services whose targetPort is a name.
	NamedPorts map[string]int32
	// BaseModel is the value of the switchboard.dev/model label; empty for a pod that is
	// not an engine.
	BaseModel string
	// Engine is the engine type from the switchboard.dev/engine label.
	Engine Engine
	// Slots is the most requests the engine runs at once as its command line declares it
	// (vLLM's --max-num-seqs, SGLang's --max-running-requests); 0 when it does not.
	Slots int
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
