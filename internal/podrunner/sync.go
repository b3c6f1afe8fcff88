package podrunner

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// defaultGracePeriod is a pod's grace period when neither its deletion nor its spec
// sets one, as in Kubernetes.
const defaultGracePeriod = 30 * time.Second

// sync brings the pod with key to what the cluster asks: an unscheduled pod is bound
// to the node; a pod bound to the node runs until it terminates or is deleted; a
// deleted pod's processes are stopped and, once they are, the object is deleted. It
// never blocks on processes: a run that is stopping queues key again when it is done.
func (r *Runner) sync(ctx context.Context, key string) error {
	pod := r.boundPod(key)
	r.mu.Lock()
	run := r.runs[key]
	r.mu.Unlock()

	// A run whose pod is gone, replaced or being deleted stops first.
	if run != nil && (pod == nil || pod.UID != run.pod.UID || pod.DeletionTimestamp != nil) {
		select {
		case <-run.done:
			r.mu.Lock()
			delete(r.runs, key)
			r.mu.Unlock()
			run = nil
		default:
			grace := r.gracePeriod(run.pod)
			if pod != nil && pod.UID == run.pod.UID {
				grace = r.gracePeriod(pod)
			}
			run.terminate(grace, true)
			return nil
		}
	}

	switch {
	case pod == nil:
		return r.bindIfUnscheduled(ctx, key)
	case pod.DeletionTimestamp != nil:
		return r.deletePod(ctx, pod)
	case run == nil && !terminal(pod):
		run = r.newPodRun(ctx, pod)
		r.mu.Lock()
		r.runs[key] = run
		r.mu.Unlock()
		go run.run()
	}
	return nil
}

// boundPod returns the pod with key if it is bound to the node.
func (r *Runner) boundPod(key string) *corev1.Pod {
	obj, ok, err := r.bound.GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	return obj.(*corev1.Pod)
}

// bindIfUnscheduled binds the pod with key to the node, as the default scheduler
// would, if it is an unscheduled pod for the default scheduler whose nodeSelector the
// node's labels satisfy. Losing the race to another runner is not an error.
func (r *Runner) bindIfUnscheduled(ctx context.Context, key string) error {
	obj, ok, err := r.unscheduled.GetByKey(key)
	if err != nil || !ok {
		return err
	}
	pod := obj.(*corev1.Pod)
	if !r.schedulable(pod) {
		return nil
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: r.opts.NodeName},
	}
	err = r.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		log.FromContext(ctx).V(1).Info("pod bound elsewhere or gone", "pod", key, "reason", err.Error())
		return nil
	case err != nil:
		return fmt.Errorf("bind pod: %w", err)
	}
	log.FromContext(ctx).Info("bound pod", "pod", key)
	return nil
}

// schedulable reports whether the node should bind pod.
func (r *Runner) schedulable(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || terminal(pod) {
		return false
	}
	if s := pod.Spec.SchedulerName; s != "" && s != corev1.DefaultSchedulerName {
		return false
	}
	labels := r.nodeLabels()
	for k, v := range pod.Spec.NodeSelector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// deletePod deletes a pod whose processes have stopped, with grace period 0 and a UID
// precondition as kubelet does, and removes its directory.
func (r *Runner) deletePod(ctx context.Context, pod *corev1.Pod) error {
	if err := os.RemoveAll(r.podDir(pod)); err != nil {
		log.FromContext(ctx).Error(err, "remove pod directory", "pod", pod.Namespace+"/"+pod.Name)
	}
	err := r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err): // gone, or replaced
		return nil
	case err != nil:
		return fmt.Errorf("delete pod: %w", err)
	}
	log.FromContext(ctx).Info("deleted pod", "pod", pod.Namespace+"/"+pod.Name)
	return nil
}

// gracePeriod is the time pod's processes get between SIGTERM and SIGKILL: the
// deletion's grace period, else the spec's, else 30s; at most MaxGracePeriod.
func (r *Runner) gracePeriod(pod *corev1.Pod) time.Duration {
	d := defaultGracePeriod
	if pod.DeletionGracePeriodSeconds != nil {
		d = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		d = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return min(d, r.opts.MaxGracePeriod)
}

// terminal reports whether pod has finished for good.
func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
