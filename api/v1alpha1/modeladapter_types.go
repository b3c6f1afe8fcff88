package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdapterScheduler names how a ModelAdapter picks the pods it is loaded on.
// +kubebuilder:validation:Enum=least-adapters;random
type AdapterScheduler string

const (
	// SchedulerLeastAdapters places the adapter on the candidates with the fewest loaded
	// adapters.
	SchedulerLeastAdapters AdapterScheduler = "least-adapters"
	// SchedulerRandom places the adapter on random candidates.
	SchedulerRandom AdapterScheduler = "random"
)

// ModelAdapterSpec is the desired placement of a LoRA adapter.
type ModelAdapterSpec struct {
	// BaseModel is the model the adapter was trained for. Only pods labelled
	// switchboard.dev/model with this value are candidates.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BaseModel string `json:"baseModel"`

	// PodSelector selects the candidate pods in the adapter's namespace, among those serving
	// BaseModel. An empty selector selects every such pod.
	// +required
	PodSelector *metav1.LabelSelector `json:"podSelector"`

	// ArtifactURL is where the engine loads the adapter from; it is passed to the engine as
	// lora_path. A load that fails is retried with backoff and reported with reason LoadFailed.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(s3|gs|https?|hf|file)://.+$') || self.startsWith('/')",message="spec.artifactURL must be an absolute path or a s3://, gs://, http(s)://, hf:// or file:// URL"
	ArtifactURL string `json:"artifactURL"`

	// Replicas is how many candidate pods load the adapter. When unset, every candidate pod
	// loads it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Replicas *int32 `json:"replicas,omitempty"`

	// SchedulerName picks the candidate pods. Defaults to least-adapters.
	// +optional
	// +kubebuilder:default=least-adapters
	SchedulerName AdapterScheduler `json:"schedulerName,omitempty"`

	// CredentialsSecretRef names a Secret in the adapter's namespace whose key "api-key" is
	// sent to the engine as a bearer token. When the Secret is missing the adapter is not
	// loaded and reason LoadFailed says why.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`
}

// SecretReference names a Secret in the referring object's namespace.
type SecretReference struct {
	// Name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ModelAdapter condition types.
const (
	// ModelAdapterConditionScheduled is True when candidate pods were chosen. Reasons:
	// Scheduled, Pending, NoCandidatePods.
	ModelAdapterConditionScheduled = "Scheduled"
	// ModelAdapterConditionReady is True when every desired replica has the adapter loaded.
	// Reasons: Loaded, Pending, Loading, LoadFailed, MaxAdaptersReached, NoCandidatePods.
	ModelAdapterConditionReady = "Ready"
)

// ModelAdapter condition reasons.
const (
	// ModelAdapterReasonPending means no controller has processed the adapter yet.
	ModelAdapterReasonPending = "Pending"
	// ModelAdapterReasonScheduled means candidate pods were chosen.
	ModelAdapterReasonScheduled = "Scheduled"
	// ModelAdapterReasonNoCandidatePods means no ready pod matches the selector and base model.
	ModelAdapterReasonNoCandidatePods = "NoCandidatePods"
	// ModelAdapterReasonLoading means loads are in progress.
	ModelAdapterReasonLoading = "Loading"
	// ModelAdapterReasonLoaded means every desired replica has the adapter loaded.
	ModelAdapterReasonLoaded = "Loaded"
	// ModelAdapterReasonLoadFailed means an engine refused or failed the load; it is retried.
	ModelAdapterReasonLoadFailed = "LoadFailed"
	// ModelAdapterReasonMaxAdaptersReached means the chosen engines hold their maximum number
	// of adapters.
	ModelAdapterReasonMaxAdaptersReached = "MaxAdaptersReached"
)

// ModelAdapterStatus is the observed placement of a ModelAdapter.
type ModelAdapterStatus struct {
	// ObservedGeneration is the metadata.generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Instances are the pods whose engine confirms, through GET /v1/models, that the adapter is
	// loaded. The gateway routes requests for the adapter only to these pods.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=10000
	Instances []string `json:"instances,omitempty"`

	// Artifacts records the spec.artifactURL the adapter was loaded from on each pod that
	// holds it: the Instances and, while their engines cannot be reached, pods that held it
	// when last asked. When spec.artifactURL changes, the controller reloads the adapter
	// (unloads it, then loads it from the new artifact) on every pod recorded with another
	// artifact, or recorded with none and whose engine does not report the new one as the
	// adapter's root; a pod is recorded with the new artifact only once its engine lists
	// the reloaded adapter. Deleting the ModelAdapter waits until the adapter is unloaded
	// from every recorded pod that still exists and is not terminating.
	// +optional
	// +listType=map
	// +listMapKey=pod
	// +kubebuilder:validation:MaxItems=10000
	Artifacts []PodArtifact `json:"artifacts,omitempty"`

	// DesiredReplicas is the number of pods the adapter should be loaded on.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`

	// ReadyReplicas is the number of entries in Instances.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// Conditions are Scheduled and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodArtifact is the artifact a ModelAdapter was loaded from on one pod.
type PodArtifact struct {
	// Pod is the pod's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`

	// ArtifactURL is the spec.artifactURL the adapter was loaded from on the pod.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	ArtifactURL string `json:"artifactURL"`
}

// ModelAdapter is a LoRA adapter loaded onto the engine pods that serve its base model. Deleting
// it unloads it from every instance.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ma,categories=switchboard
// +kubebuilder:printcolumn:name="Base",type=string,JSONPath=`.spec.baseModel`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ModelAdapter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired placement.
	// +required
	Spec ModelAdapterSpec `json:"spec"`

	// Status is the observed placement, written by the manager.
	// +optional
	// +kubebuilder:default={desiredReplicas: 0, readyReplicas: 0, conditions: {{type: "Ready", status: "Unknown", reason: "Pending", message: "Waiting for controller", lastTransitionTime: "1970-01-01T00:00:00Z"}}}
	Status ModelAdapterStatus `json:"status,omitempty"`
}

// ModelAdapterList is a list of ModelAdapter.
// +kubebuilder:object:root=true
type ModelAdapterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelAdapter `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ModelAdapter{}, &ModelAdapterList{})
}
