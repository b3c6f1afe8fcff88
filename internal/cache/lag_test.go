package cache

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

func TestPodsBehind(t *testing.T) {
	// known returns the cache's view of pods, as the pod feed records them.
	known := func(pods ...*corev1.Pod) map[endpoint.Key]*Pod {
		out := map[endpoint.Key]*Pod{}
		for _, pod := range pods {
			ep, _, _ := EndpointFromPod(pod)
			out[ep.Key] = &Pod{Endpoint: ep}
		}
		return out
	}
	tests := []struct {
		name   string
		listed []*corev1.Pod
		known  map[endpoint.Key]*Pod
		want   bool
	}{
		{"same pods", []*corev1.Pod{makePodObject("a").Build()}, known(makePodObject("a").Build()), false},
		{"readiness not applied", []*corev1.Pod{makePodObject("a").Build()}, known(makePodObject("a").NotReady().Build()), true},
		{"new address not applied", []*corev1.Pod{makePodObject("a").IP("10.0.0.2").Build()}, known(makePodObject("a").Build()), true},
		{"deletion not applied", []*corev1.Pod{makePodObject("a").Terminating().Build()}, known(makePodObject("a").Build()), true},
		{"labels not applied", []*corev1.Pod{makePodObject("a").Label("app", "x").Build()}, known(makePodObject("a").Build()), true},
		{"new pod missing", []*corev1.Pod{makePodObject("a").Build(), makePodObject("b").Build()}, known(makePodObject("a").Build()), true},
		{"removed pod still known", []*corev1.Pod{makePodObject("a").Build()}, known(makePodObject("a").Build(), makePodObject("b").Build()), true},
		{"invalid engine pod dropped", []*corev1.Pod{makePodObject("a").Label(v1alpha1.LabelPort, "x").Build()}, known(), false},
		{"invalid engine pod still known", []*corev1.Pod{makePodObject("a").Label(v1alpha1.LabelPort, "x").Build()}, known(makePodObject("a").Build()), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var listed []corev1.Pod
			for _, p := range tt.listed {
				listed = append(listed, *p)
			}
			if got := PodsBehind(listed, tt.known); got != tt.want {
				t.Errorf("PodsBehind = %v, want %v", got, tt.want)
			}
		})
	}
}
