package v1alpha1

// Labels that make a Pod an engine endpoint (DESIGN §3).
const (
	// LabelModel marks a Pod as an engine endpoint serving the base model named by its value.
	LabelModel = "switchboard.dev/model"
	// LabelEngine names the engine running in the Pod, "vllm" (the default) or "sglang";
	// it selects the metric names scraped.
	LabelEngine = "switchboard.dev/engine"
	// LabelPort is the engine's serving port, which also serves /metrics; DefaultEnginePort
	// when absent.
	LabelPort = "switchboard.dev/port"
)

// DefaultEnginePort is the serving port of an engine Pod without the LabelPort label.
const DefaultEnginePort = 8000
