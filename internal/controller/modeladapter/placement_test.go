package modeladapter

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/engineclient"
)

func TestPlan(t *testing.T) {
	reverse := func(cs []candidate) { slices.Reverse(cs) }
	tests := []struct {
		name      string
		cands     []candidate
		target    int
		scheduler v1alpha1.AdapterScheduler
		want      placement
	}{
		{
			name:   "least adapters first, ties by name",
			cands:  []candidate{{name: "a", adapters: 3}, {name: "b", adapters: 1}, {name: "c", adapters: 1}},
			target: 2, scheduler: v1alpha1.SchedulerLeastAdapters,
			want: placement{load: []string{"b", "c", "a"}},
		},
		{
			name:   "loaded copies are kept",
			cands:  []candidate{{name: "a", adapters: 5, loaded: true}, {name: "b", adapters: 0}},
			target: 1, scheduler: v1alpha1.SchedulerLeastAdapters,
			want: placement{keep: []string{"a"}},
		},
		{
			name: "surplus dropped from the busiest engines",
			cands: []candidate{
				{name: "a", adapters: 4, loaded: true}, {name: "b", adapters: 1, loaded: true},
				{name: "c", adapters: 2, loaded: true},
			},
			target: 1, scheduler: v1alpha1.SchedulerLeastAdapters,
			want: placement{keep: []string{"b"}, drop: []string{"c", "a"}},
		},
		{
			name:   "missing copies added next to kept ones",
			cands:  []candidate{{name: "a", loaded: true}, {name: "b", adapters: 2}, {name: "c"}},
			target: 3, scheduler: v1alpha1.SchedulerLeastAdapters,
			want: placement{keep: []string{"a"}, load: []string{"c", "b"}},
		},
		{
			name:   "random uses the shuffle",
			cands:  []candidate{{name: "a"}, {name: "b", adapters: 9}},
			target: 1, scheduler: v1alpha1.SchedulerRandom,
			want: placement{load: []string{"b", "a"}},
		},
		{
			name:   "zero target drops everything",
			cands:  []candidate{{name: "a", loaded: true}},
			target: 0, scheduler: v1alpha1.SchedulerLeastAdapters,
			want: placement{drop: []string{"a"}},
		},
		{
			name:   "stale copies are reloaded where they are",
			cands:  []candidate{{name: "a", loaded: true, stale: true}, {name: "b", loaded: true}, {name: "c"}},
			target: 3, scheduler: v1alpha1.SchedulerLeastAdapters,
			want: placement{keep: []string{"b"}, reload: []string{"a"}, load: []string{"c"}},
		},
		{
			name: "surplus dropped from stale copies first",
			cands: []candidate{
				{name: "a", adapters: 1, loaded: true, stale: true}, {name: "b", adapters: 4, loaded: true},
			},
			target: 1, scheduler: v1alpha1.SchedulerLeastAdapters,
			want: placement{keep: []string{"b"}, drop: []string{"a"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan(tt.cands, tt.target, tt.scheduler, reverse)
			if !slices.Equal(got.keep, tt.want.keep) || !slices.Equal(got.reload, tt.want.reload) ||
				!slices.Equal(got.drop, tt.want.drop) || !slices.Equal(got.load, tt.want.load) {
				t.Errorf("plan = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSetStatus(t *testing.T) {
	maxErr := fmt.Errorf("pod a: %w", &engineclient.Error{Op: "load adapter", StatusCode: 400, Message: "max_loras=1 adapters are already loaded"})
	otherErr := errors.New("pod b: connection refused")
	tests := []struct {
		name            string
		o               outcome
		scheduled       metav1.ConditionStatus
		scheduledReason string
		ready           metav1.ConditionStatus
		readyReason     string
	}{
		{"loaded", outcome{candidates: 2, want: 2, all: true, instances: map[string]string{"a": "s3://x", "b": "s3://x"}},
			metav1.ConditionTrue, v1alpha1.ModelAdapterReasonScheduled, metav1.ConditionTrue, v1alpha1.ModelAdapterReasonLoaded},
		{"no candidates, all pods", outcome{all: true},
			metav1.ConditionFalse, v1alpha1.ModelAdapterReasonNoCandidatePods, metav1.ConditionFalse, v1alpha1.ModelAdapterReasonNoCandidatePods},
		{"no candidates, zero replicas", outcome{},
			metav1.ConditionTrue, v1alpha1.ModelAdapterReasonScheduled, metav1.ConditionTrue, v1alpha1.ModelAdapterReasonLoaded},
		{"max adapters", outcome{candidates: 1, want: 1, failures: []error{maxErr}},
			metav1.ConditionTrue, v1alpha1.ModelAdapterReasonScheduled, metav1.ConditionFalse, v1alpha1.ModelAdapterReasonMaxAdaptersReached},
		{"mixed failures", outcome{candidates: 2, want: 2, failures: []error{maxErr, otherErr}},
			metav1.ConditionTrue, v1alpha1.ModelAdapterReasonScheduled, metav1.ConditionFalse, v1alpha1.ModelAdapterReasonLoadFailed},
		{"missing secret", outcome{keyErr: errors.New("no secret")},
			metav1.ConditionTrue, v1alpha1.ModelAdapterReasonScheduled, metav1.ConditionFalse, v1alpha1.ModelAdapterReasonLoadFailed},
		{"pending", outcome{candidates: 1, want: 1, pending: true},
			metav1.ConditionTrue, v1alpha1.ModelAdapterReasonScheduled, metav1.ConditionFalse, v1alpha1.ModelAdapterReasonLoading},
		{"fewer candidates than replicas", outcome{candidates: 1, want: 3, instances: map[string]string{"a": "s3://x"}},
			metav1.ConditionTrue, v1alpha1.ModelAdapterReasonScheduled, metav1.ConditionFalse, v1alpha1.ModelAdapterReasonNoCandidatePods},
		{"invalid selector", outcome{selectorErr: errors.New("bad")},
			metav1.ConditionFalse, v1alpha1.ModelAdapterReasonNoCandidatePods, metav1.ConditionFalse, v1alpha1.ModelAdapterReasonNoCandidatePods},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st v1alpha1.ModelAdapterStatus
			setStatus(&st, 7, "ns", "llama", tt.o)
			s := meta.FindStatusCondition(st.Conditions, v1alpha1.ModelAdapterConditionScheduled)
			r := meta.FindStatusCondition(st.Conditions, v1alpha1.ModelAdapterConditionReady)
			if s.Status != tt.scheduled || s.Reason != tt.scheduledReason {
				t.Errorf("Scheduled = %s/%s, want %s/%s", s.Status, s.Reason, tt.scheduled, tt.scheduledReason)
			}
			if r.Status != tt.ready || r.Reason != tt.readyReason {
				t.Errorf("Ready = %s/%s (%s), want %s/%s", r.Status, r.Reason, r.Message, tt.ready, tt.readyReason)
			}
			if st.ObservedGeneration != 7 || s.ObservedGeneration != 7 || r.ObservedGeneration != 7 {
				t.Error("observedGeneration not set everywhere")
			}
			if st.ReadyReplicas != int32(len(tt.o.instances)) {
				t.Errorf("readyReplicas = %d, want %d", st.ReadyReplicas, len(tt.o.instances))
			}
			// A second pass with the same outcome changes nothing (no-op writes are skipped).
			again := *st.DeepCopy()
			setStatus(&again, 7, "ns", "llama", tt.o)
			if !equalStatus(st, again) {
				t.Error("setStatus is not idempotent")
			}
		})
	}
}

func TestSetStatusRecordsArtifacts(t *testing.T) {
	var st v1alpha1.ModelAdapterStatus
	setStatus(&st, 1, "ns", "llama", outcome{
		candidates: 3, want: 3,
		instances:   map[string]string{"b": "s3://new", "a": "s3://old", "d": ""},
		unreachable: map[string]string{"c": "s3://old"},
	})
	if !slices.Equal(st.Instances, []string{"a", "b", "d"}) {
		t.Errorf("instances = %v, want [a b d]", st.Instances)
	}
	want := []v1alpha1.PodArtifact{{Pod: "a", ArtifactURL: "s3://old"}, {Pod: "b", ArtifactURL: "s3://new"}, {Pod: "c", ArtifactURL: "s3://old"}}
	if !slices.Equal(st.Artifacts, want) {
		t.Errorf("artifacts = %v, want %v (an unknown artifact is not recorded, an unreachable pod's is kept)", st.Artifacts, want)
	}
}

func TestSplitRecordedKeepsStatus(t *testing.T) {
	status := v1alpha1.ModelAdapterStatus{
		Instances: []string{"a", "b"},
		Artifacts: []v1alpha1.PodArtifact{{Pod: "a", ArtifactURL: "s3://x"}, {Pod: "c", ArtifactURL: "s3://x"}},
	}
	instances, others := splitRecorded(&status, recordedArtifacts(&status))
	again := *status.DeepCopy()
	setStatus(&again, 1, "ns", "llama", outcome{instances: instances, unreachable: others})
	if !slices.Equal(again.Instances, status.Instances) || !slices.Equal(again.Artifacts, status.Artifacts) {
		t.Errorf("instances, artifacts = %v, %v; want %v, %v", again.Instances, again.Artifacts, status.Instances, status.Artifacts)
	}
}

func TestCopyArtifact(t *testing.T) {
	ma := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Name: "sql"}, Spec: v1alpha1.ModelAdapterSpec{ArtifactURL: "s3://new"}}
	state := func(root string) engineState {
		return engineState{pod: &cache.Pod{Endpoint: endpoint.Endpoint{Key: endpoint.Key{Name: "p"}}},
			cards: []engineclient.Model{{ID: "llama"}, {ID: "sql", Root: root}}}
	}
	tests := []struct {
		name, root, recorded, want string
	}{
		{"engine reports the spec's artifact", "s3://new", "s3://old", "s3://new"},
		{"recorded with the spec's artifact, engine rewrites the path", "/cache/sql", "s3://new", "s3://new"},
		{"engine reports another artifact", "s3://old", "", "s3://old"},
		{"engine reports no root", "", "s3://old", "s3://old"},
		{"nothing known", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := copyArtifact(ma, map[string]string{"p": tt.recorded}, state(tt.root)); got != tt.want {
				t.Errorf("copyArtifact = %q, want %q", got, tt.want)
			}
		})
	}
}

func equalStatus(a, b v1alpha1.ModelAdapterStatus) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func TestRetryBackoff(t *testing.T) {
	b := &retryBackoff{initial: time.Second, max: 5 * time.Second}
	k := types.NamespacedName{Namespace: "ns", Name: "a"}
	var got []time.Duration
	for range 5 {
		got = append(got, b.next(k))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("delays = %v, want %v", got, want)
	}
	b.forget(k)
	if d := b.next(k); d != time.Second {
		t.Errorf("delay after forget = %v, want 1s", d)
	}
}
