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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan(tt.cands, tt.target, tt.scheduler, reverse)
			if !slices.Equal(got.keep, tt.want.keep) || !slices.Equal(got.drop, tt.want.drop) ||
				!slices.Equal(got.load, tt.want.load) {
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
		{"loaded", outcome{candidates: 2, want: 2, all: true, instances: []string{"a", "b"}},
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
		{"fewer candidates than replicas", outcome{candidates: 1, want: 3, instances: []string{"a"}},
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
