package modeladapter

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/engineclient"
)

// setStatus writes the observed placement o of a ModelAdapter of generation gen into
// status: instances, replica counts, and the Scheduled and Ready conditions.
func setStatus(status *v1alpha1.ModelAdapterStatus, gen int64, namespace, baseModel string, o outcome) {
	status.ObservedGeneration = gen
	status.Instances = nil
	if len(o.instances) > 0 {
		status.Instances = slices.Sorted(maps.Keys(o.instances))
	}
	status.Artifacts = podArtifacts(mergeArtifacts(o.unreachable, o.instances))
	status.DesiredReplicas = o.want
	status.ReadyReplicas = int32(len(status.Instances))

	scheduled := metav1.Condition{
		Type:    v1alpha1.ModelAdapterConditionScheduled,
		Status:  metav1.ConditionTrue,
		Reason:  v1alpha1.ModelAdapterReasonScheduled,
		Message: fmt.Sprintf("%d replicas desired, %d candidate pods", o.want, o.candidates),
	}
	ready := metav1.Condition{Type: v1alpha1.ModelAdapterConditionReady, Status: metav1.ConditionFalse}
	noCandidates := fmt.Sprintf("No ready pod in namespace %s serves base model %s and matches spec.podSelector",
		namespace, baseModel)
	switch {
	case o.selectorErr != nil:
		scheduled.Status, scheduled.Reason, scheduled.Message =
			metav1.ConditionFalse, v1alpha1.ModelAdapterReasonNoCandidatePods, o.selectorErr.Error()
		ready.Reason, ready.Message = v1alpha1.ModelAdapterReasonNoCandidatePods, o.selectorErr.Error()
	case o.keyErr != nil:
		ready.Reason, ready.Message = v1alpha1.ModelAdapterReasonLoadFailed, o.keyErr.Error()
	case o.candidates == 0 && (o.want > 0 || o.all):
		scheduled.Status, scheduled.Reason, scheduled.Message =
			metav1.ConditionFalse, v1alpha1.ModelAdapterReasonNoCandidatePods, noCandidates
		ready.Reason, ready.Message = v1alpha1.ModelAdapterReasonNoCandidatePods, noCandidates
	case status.ReadyReplicas >= o.want:
		ready.Status, ready.Reason = metav1.ConditionTrue, v1alpha1.ModelAdapterReasonLoaded
		ready.Message = fmt.Sprintf("Loaded on %d of %d desired pods", status.ReadyReplicas, o.want)
	case len(o.failures) > 0:
		ready.Reason = v1alpha1.ModelAdapterReasonLoadFailed
		if allMaxAdapters(o.failures) {
			ready.Reason = v1alpha1.ModelAdapterReasonMaxAdaptersReached
		}
		ready.Message = fmt.Sprintf("Loaded on %d of %d desired pods; retrying: %v",
			status.ReadyReplicas, o.want, errors.Join(o.failures...))
	case o.pending:
		ready.Reason = v1alpha1.ModelAdapterReasonLoading
		ready.Message = fmt.Sprintf("Loaded on %d of %d desired pods; waiting for engines to list it",
			status.ReadyReplicas, o.want)
	default:
		ready.Reason = v1alpha1.ModelAdapterReasonNoCandidatePods
		ready.Message = fmt.Sprintf("Loaded on %d of %d desired pods; only %d candidate pods",
			status.ReadyReplicas, o.want, o.candidates)
	}
	scheduled.ObservedGeneration, ready.ObservedGeneration = gen, gen
	ready.Message = truncate(ready.Message)
	meta.SetStatusCondition(&status.Conditions, scheduled)
	meta.SetStatusCondition(&status.Conditions, ready)
}

// allMaxAdapters reports whether every failure is an engine holding its maximum number of
// adapters.
func allMaxAdapters(errs []error) bool {
	for _, err := range errs {
		if !errors.Is(err, engineclient.ErrMaxAdapters) {
			return false
		}
	}
	return len(errs) > 0
}

// maxMessage is the longest condition message written; the API allows 32768 bytes.
const maxMessage = 4096

// truncate shortens msg to maxMessage bytes.
func truncate(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	return strings.ToValidUTF8(msg[:maxMessage-3], "") + "..."
}
