package podrunner

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// podState is what the runner knows of a pod it runs, from which its status follows.
type podState struct {
	ip         netip.Addr // invalid until allocated
	startTime  metav1.Time
	containers []containerState // in the order of the pod's containers
}

// containerState is what the runner knows of one container.
type containerState struct {
	state       corev1.ContainerState
	last        corev1.ContainerState // the previous termination, if any
	restarts    int32
	ready       bool
	finished    bool   // terminated and will not restart
	containerID string // of the running or last process
}

// DeepCopy returns a copy of c that shares no pointers with it.
func (c *containerState) DeepCopy() *containerState {
	out := *c
	out.state = *c.state.DeepCopy()
	out.last = *c.last.DeepCopy()
	return &out
}

// podConditions are the condition types the runner owns; the pod's other conditions
// (readiness gates, disruption targets) are kept as they are.
var podConditions = []corev1.PodConditionType{
	corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized,
	corev1.ContainersReady, corev1.PodReady,
}

// podStatus returns the status of cur, the pod as the API server has it, given the
// runner's state s, at time now. Fields the runner does not own (qosClass, for one)
// keep cur's values; conditions whose status does not change keep their transition
// time.
func podStatus(cur *corev1.Pod, s podState, now metav1.Time) corev1.PodStatus {
	status := *cur.Status.DeepCopy()
	status.Phase = phase(s)
	status.Reason, status.Message = "", ""
	status.HostIP, status.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	status.PodIP, status.PodIPs = "", nil
	if s.ip.IsValid() {
		status.PodIP, status.PodIPs = s.ip.String(), []corev1.PodIP{{IP: s.ip.String()}}
	}
	status.StartTime = ptr.To(s.startTime)

	status.ContainerStatuses = make([]corev1.ContainerStatus, len(cur.Spec.Containers))
	var unready []string
	for i, c := range cur.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		if i < len(s.containers) {
			st := s.containers[i]
			cs.State, cs.LastTerminationState = st.state, st.last
			cs.Ready, cs.RestartCount, cs.ContainerID = st.ready, st.restarts, st.containerID
			cs.Started = ptr.To(st.state.Running != nil)
		}
		if !cs.Ready {
			unready = append(unready, c.Name)
		}
		status.ContainerStatuses[i] = cs
	}

	conditions := []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		condition(corev1.PodReadyToStartContainers, s.ip.IsValid(), "", ""),
	}
	if len(cur.Spec.InitContainers) > 0 {
		conditions = append(conditions, condition(corev1.PodInitialized, false, "InitContainersNotSupported",
			"init containers are not supported by the local pod runner"))
	} else {
		conditions = append(conditions, condition(corev1.PodInitialized, true, "", ""))
	}
	if status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed {
		unready = nil // a finished pod is not ready, whatever its containers were
		conditions = append(conditions,
			condition(corev1.ContainersReady, false, "PodCompleted", ""),
			condition(corev1.PodReady, false, "PodCompleted", ""))
	} else {
		msg := fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
		conditions = append(conditions, condition(corev1.ContainersReady, len(unready) == 0, "ContainersNotReady", msg))
		ready := condition(corev1.PodReady, len(unready) == 0, "ContainersNotReady", msg)
		if gates := falseGates(cur); ready.Status == corev1.ConditionTrue && len(gates) > 0 {
			ready = condition(corev1.PodReady, false, "ReadinessGatesNotReady",
				fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not True", gates[0]))
		}
		conditions = append(conditions, ready)
	}
	for i := range conditions {
		conditions[i].LastTransitionTime = now
		for _, old := range cur.Status.Conditions {
			if old.Type == conditions[i].Type && old.Status == conditions[i].Status {
				conditions[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	for _, old := range cur.Status.Conditions {
		if !ownCondition(old.Type) {
			conditions = append(conditions, old)
		}
	}
	status.Conditions = conditions
	return status
}

// condition returns a condition of type t, True if ok, else False with reason and
// message.
func condition(t corev1.PodConditionType, ok bool, reason, message string) corev1.PodCondition {
	if ok {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
	}
	return corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: message}
}

// ownCondition reports whether the runner owns condition type t.
func ownCondition(t corev1.PodConditionType) bool {
	for _, own := range podConditions {
		if t == own {
			return true
		}
	}
	return false
}

// falseGates returns pod's readiness gates whose condition is not True.
func falseGates(pod *corev1.Pod) []corev1.PodConditionType {
	var gates []corev1.PodConditionType
	for _, g := range pod.Spec.ReadinessGates {
		ok := false
		for _, c := range pod.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				ok = true
			}
		}
		if !ok {
			gates = append(gates, g.ConditionType)
		}
	}
	return gates
}

// phase returns the pod's phase as kubelet derives it: Succeeded or Failed once every
// container has finished for good (Failed if any failed); Pending while a container
// has never run; Running otherwise.
func phase(s podState) corev1.PodPhase {
	finished, failed, pending := 0, 0, 0
	for _, c := range s.containers {
		switch {
		case c.finished:
			finished++
			if c.state.Terminated != nil && c.state.Terminated.ExitCode != 0 {
				failed++
			}
		case c.state.Running == nil && c.state.Terminated == nil && c.last.Terminated == nil:
			pending++
		}
	}
	switch {
	case len(s.containers) > 0 && finished == len(s.containers) && failed > 0:
		return corev1.PodFailed
	case len(s.containers) > 0 && finished == len(s.containers):
		return corev1.PodSucceeded
	case pending > 0:
		return corev1.PodPending
	}
	return corev1.PodRunning
}
