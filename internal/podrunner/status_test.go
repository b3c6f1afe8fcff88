package podrunner

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Minute))
)

func running(ready bool) containerState {
	return containerState{state: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}, ready: ready, containerID: "pod-runner://42"}
}

func terminated(code int32, finished bool) containerState {
	return containerState{state: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}, finished: finished}
}

func waitingFor(reason string) containerState {
	return containerState{state: waiting(reason, "")}
}

func crashLooping() containerState {
	return containerState{state: waiting("CrashLoopBackOff", ""), restarts: 2,
		last: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}
}

func TestPhase(t *testing.T) {
	tests := []struct {
		name       string
		containers []containerState
		want       corev1.PodPhase
	}{
		{"creating", []containerState{waitingFor("ContainerCreating")}, corev1.PodPending},
		{"unknown image beside a running container", []containerState{running(true), waitingFor("ErrImagePull")}, corev1.PodPending},
		{"running", []containerState{running(false)}, corev1.PodRunning},
		{"crash looping", []containerState{crashLooping()}, corev1.PodRunning},
		{"stopped with the runner", []containerState{terminated(143, false)}, corev1.PodRunning},
		{"one finished, one running", []containerState{terminated(0, true), running(true)}, corev1.PodRunning},
		{"all succeeded", []containerState{terminated(0, true), terminated(0, true)}, corev1.PodSucceeded},
		{"one failed", []containerState{terminated(0, true), terminated(2, true)}, corev1.PodFailed},
	}
	for _, tt := range tests {
		if got := phase(podState{containers: tt.containers}); got != tt.want {
			t.Errorf("%s: phase = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func testPod(containers ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: "img-" + c})
	}
	pod.Status.QOSClass = corev1.PodQOSBestEffort
	return pod
}

func conditionOf(s corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func TestPodStatusOfAReadyPod(t *testing.T) {
	s := podStatus(testPod("a", "b"), podState{
		ip: netip.MustParseAddr("127.0.2.7"), startTime: t0, containers: []containerState{running(true), running(true)},
	}, t1)
	if s.Phase != corev1.PodRunning || s.PodIP != "127.0.2.7" || len(s.PodIPs) != 1 || s.HostIP != hostIP || !s.StartTime.Equal(&t0) {
		t.Errorf("status = %+v, want Running at 127.0.2.7 since t0", s)
	}
	if s.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("qosClass = %q, want the API server's kept", s.QOSClass)
	}
	for _, ct := range podConditions {
		if c := conditionOf(s, ct); c == nil || c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&t1) {
			t.Errorf("condition %s = %+v, want True since t1", ct, c)
		}
	}
	if len(s.ContainerStatuses) != 2 {
		t.Fatalf("container statuses = %+v, want 2", s.ContainerStatuses)
	}
	cs := s.ContainerStatuses[1]
	if cs.Name != "b" || cs.Image != "img-b" || !cs.Ready || cs.Started == nil || !*cs.Started || cs.State.Running == nil || cs.ContainerID != "pod-runner://42" {
		t.Errorf("container status = %+v, want b running, started and ready", cs)
	}
}

func TestPodStatusNotReady(t *testing.T) {
	s := podStatus(testPod("a", "b"), podState{ip: netip.MustParseAddr("127.0.2.7"), containers: []containerState{running(true), crashLooping()}}, t1)
	for _, ct := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		c := conditionOf(s, ct)
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" || c.Message != "containers with unready status: [b]" {
			t.Errorf("condition %s = %+v, want False naming b", ct, c)
		}
	}
	if cs := s.ContainerStatuses[1]; cs.RestartCount != 2 || cs.LastTerminationState.Terminated == nil || *cs.Started {
		t.Errorf("container status = %+v, want 2 restarts, the last termination and not started", cs)
	}
}

func TestPodStatusWithoutAddressYet(t *testing.T) {
	s := podStatus(testPod("a"), podState{containers: []containerState{waitingFor("ContainerCreating")}}, t1)
	if s.Phase != corev1.PodPending || s.PodIP != "" || s.PodIPs != nil {
		t.Errorf("status = %+v, want Pending without pod IP", s)
	}
	if c := conditionOf(s, corev1.PodReadyToStartContainers); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("PodReadyToStartContainers = %+v, want False", c)
	}
}

func TestPodStatusKeepsTransitionTimesAndOtherConditions(t *testing.T) {
	cur := testPod("a")
	cur.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t0},
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: t0},
		{Type: "example.com/Drained", Status: corev1.ConditionFalse, LastTransitionTime: t0},
	}
	s := podStatus(cur, podState{ip: netip.MustParseAddr("127.0.2.7"), containers: []containerState{running(true)}}, t1)
	if c := conditionOf(s, corev1.PodReady); !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("Ready, unchanged, moved to %v; want t0", c.LastTransitionTime)
	}
	if c := conditionOf(s, corev1.ContainersReady); c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("ContainersReady = %+v, want True since t1", c)
	}
	if c := conditionOf(s, "example.com/Drained"); c == nil || c.Status != corev1.ConditionFalse || !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("a condition the runner does not own = %+v, want it kept", c)
	}
}

func TestPodStatusHonoursReadinessGates(t *testing.T) {
	cur := testPod("a")
	cur.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/InRotation"}}
	state := podState{ip: netip.MustParseAddr("127.0.2.7"), containers: []containerState{running(true)}}
	s := podStatus(cur, state, t1)
	if c := conditionOf(s, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" {
		t.Errorf("Ready with its gate's condition missing = %+v, want False, ReadinessGatesNotReady", c)
	}
	if c := conditionOf(s, corev1.ContainersReady); c.Status != corev1.ConditionTrue {
		t.Errorf("ContainersReady = %+v, want True", c)
	}
	cur.Status.Conditions = []corev1.PodCondition{{Type: "example.com/InRotation", Status: corev1.ConditionTrue}}
	if c := conditionOf(podStatus(cur, state, t1), corev1.PodReady); c.Status != corev1.ConditionTrue {
		t.Errorf("Ready with its gate True = %+v, want True", c)
	}
}

func TestPodStatusOfAFinishedPod(t *testing.T) {
	s := podStatus(testPod("a"), podState{ip: netip.MustParseAddr("127.0.2.7"), containers: []containerState{terminated(0, true)}}, t1)
	if s.Phase != corev1.PodSucceeded {
		t.Errorf("phase = %s, want Succeeded", s.Phase)
	}
	for _, ct := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		if c := conditionOf(s, ct); c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted" {
			t.Errorf("condition %s = %+v, want False, PodCompleted", ct, c)
		}
	}
}

func TestPodStatusWithInitContainers(t *testing.T) {
	cur := testPod("a")
	cur.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "img"}}
	p := (&Runner{opts: Options{StateDir: "/state"}}).newPodRun(context.Background(), cur)
	s := podStatus(cur, p.snapshot(), t1)
	if c := conditionOf(s, corev1.PodInitialized); c.Status != corev1.ConditionFalse || c.Reason != "InitContainersNotSupported" {
		t.Errorf("Initialized = %+v, want False, InitContainersNotSupported", c)
	}
	if w := s.ContainerStatuses[0].State.Waiting; s.Phase != corev1.PodPending || w == nil || w.Reason != "PodInitializing" {
		t.Errorf("status = %+v, want Pending with its container PodInitializing", s)
	}
}

func TestBackoff(t *testing.T) {
	var b backoff
	var got []time.Duration
	for range 6 {
		got = append(got, b.next())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("back-off delays = %v, want %v", got, want)
		}
	}
	b.reset()
	if d := b.next(); d != time.Second {
		t.Errorf("after reset, next = %v, want 1s", d)
	}
}
