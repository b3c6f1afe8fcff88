package modeladapter

import (
	"maps"
	"slices"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
)

// recordedArtifacts returns the pods status records as holding the adapter, each with
// the artifact recorded for it ("" when none): status.instances and status.artifacts.
func recordedArtifacts(status *v1alpha1.ModelAdapterStatus) map[string]string {
	recorded := make(map[string]string, len(status.Instances)+len(status.Artifacts))
	for _, name := range status.Instances {
		recorded[name] = ""
	}
	for _, a := range status.Artifacts {
		recorded[a.Pod] = a.ArtifactURL
	}
	return recorded
}

// splitRecorded splits recorded, the recordedArtifacts of status, into the instances and
// the other recorded pods, so that a pass that asks no engine keeps the status as it is.
func splitRecorded(status *v1alpha1.ModelAdapterStatus, recorded map[string]string) (instances, others map[string]string) {
	others = maps.Clone(recorded)
	instances = make(map[string]string, len(status.Instances))
	for _, name := range status.Instances {
		instances[name] = recorded[name]
		delete(others, name)
	}
	return instances, others
}

// copyArtifact returns the artifact of ma's copy on the engine of s, as far as known:
// spec.artifactURL when the engine reports it as the adapter's root or the controller
// recorded loading it from there (engines may report a rewritten path), else the root the
// engine reports, else the recorded one; "" when neither says.
func copyArtifact(ma *v1alpha1.ModelAdapter, recorded map[string]string, s engineState) string {
	card, _ := s.card(ma.Name)
	rec := recorded[s.pod.Key.Name]
	switch {
	case card.Root == ma.Spec.ArtifactURL || rec == ma.Spec.ArtifactURL:
		return ma.Spec.ArtifactURL
	case card.Root != "":
		return card.Root
	}
	return rec
}

// podArtifacts returns the known artifacts of byPod as status.artifacts entries, sorted
// by pod; pods of unknown artifact are left out.
func podArtifacts(byPod map[string]string) []v1alpha1.PodArtifact {
	var out []v1alpha1.PodArtifact
	for _, pod := range slices.Sorted(maps.Keys(byPod)) {
		if url := byPod[pod]; url != "" {
			out = append(out, v1alpha1.PodArtifact{Pod: pod, ArtifactURL: url})
		}
	}
	return out
}

// mergeArtifacts returns the entries of a and b in one map, b's winning.
func mergeArtifacts(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}
