package podrunner

import (
	"context"
	"fmt"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// version is what the Node reports as its kubelet and container runtime versions.
const version = "v0.0.0-switchboard-pod-runner"

// nodeLabels are the labels the runner gives its Node, which pods' nodeSelectors are
// matched against.
func (r *Runner) nodeLabels() map[string]string {
	return map[string]string{
		corev1.LabelHostname:   r.opts.NodeName,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
	}
}

// nodeResources is the Node's capacity and allocatable: more than local pods ask for.
var nodeResources = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("1000"),
	corev1.ResourceMemory:           resource.MustParse("1Ti"),
	corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	corev1.ResourcePods:             resource.MustParse("1000"),
}

// registerNode creates or updates the Node, marks it Ready and renews its Lease,
// retrying every second until it succeeds or ctx ends; it reports whether it
// succeeded.
func (r *Runner) registerNode(ctx context.Context) bool {
	for {
		err := r.ensureNode(ctx)
		if err == nil {
			err = r.updateNodeStatus(ctx, true)
		}
		if err == nil {
			err = r.renewLease(ctx)
		}
		if err == nil {
			log.FromContext(ctx).Info("registered node")
			return true
		}
		log.FromContext(ctx).Error(err, "register node; will retry")
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// ensureNode creates the Node or adds the runner's labels to it, and records its UID.
func (r *Runner) ensureNode(ctx context.Context) error {
	nodes := r.client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, r.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: r.opts.NodeName, Labels: r.nodeLabels()},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("get or create node: %w", err)
	}
	missing := false
	for k, v := range r.nodeLabels() {
		if node.Labels[k] != v {
			missing = true
		}
	}
	if missing {
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		for k, v := range r.nodeLabels() {
			node.Labels[k] = v
		}
		if node, err = nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("label node: %w", err)
		}
	}
	r.nodeUID = node.UID
	return nil
}

// updateNodeStatus writes the Node's status: its resources, address and kubelet
// endpoint, and condition Ready set to ready with a fresh heartbeat.
//
// The Node has no Hostname address: the API server prefers one to reach kubelets, and
// the node's name does not resolve.
func (r *Runner) updateNodeStatus(ctx context.Context, ready bool) error {
	nodes := r.client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, r.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node: %w", err)
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		node.Status.Capacity = nodeResources.DeepCopy()
		node.Status.Allocatable = nodeResources.DeepCopy()
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: hostIP}}
		node.Status.DaemonEndpoints = corev1.NodeDaemonEndpoints{}
		if r.kubelet.IsValid() {
			node.Status.Addresses[0].Address = r.kubelet.Addr().String()
			node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(r.kubelet.Port())
		}
		node.Status.NodeInfo = corev1.NodeSystemInfo{
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			KubeletVersion:          version,
			ContainerRuntimeVersion: "switchboard-pod-runner://" + version,
		}
		readyCondition := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "the local pod runner is posting ready status"}
		if !ready {
			readyCondition.Status, readyCondition.Reason, readyCondition.Message =
				corev1.ConditionFalse, "KubeletNotReady", "the local pod runner stopped"
		}
		conditions := []corev1.NodeCondition{
			readyCondition,
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		}
		for _, c := range conditions {
			setNodeCondition(&node.Status.Conditions, c, now)
		}
		_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// setNodeCondition sets c in conditions with heartbeat now, keeping the transition
// time of a condition whose status does not change.
func setNodeCondition(conditions *[]corev1.NodeCondition, c corev1.NodeCondition, now metav1.Time) {
	c.LastHeartbeatTime, c.LastTransitionTime = now, now
	for i, old := range *conditions {
		if old.Type == c.Type {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			(*conditions)[i] = c
			return
		}
	}
	*conditions = append(*conditions, c)
}

// renewLease renews the Node's Lease in kube-node-lease, creating the namespace and
// the Lease if they are missing. The Lease lasts four heartbeats, as kubelet's does, and
// is owned by the Node.
func (r *Runner) renewLease(ctx context.Context) error {
	leases := r.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(r.opts.NodeName),
		LeaseDurationSeconds: ptr.To(max(1, int32((4 * r.opts.HeartbeatInterval).Seconds()))),
		RenewTime:            &now,
	}
	owners := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: r.opts.NodeName, UID: r.nodeUID}}
	lease, err := leases.Get(ctx, r.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: corev1.NamespaceNodeLease}}
		if _, err := r.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", corev1.NamespaceNodeLease, err)
		}
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: r.opts.NodeName, OwnerReferences: owners},
			Spec:       spec,
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get lease: %w", err)
	}
	lease.OwnerReferences, lease.Spec = owners, spec
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	return nil
}

// heartbeat refreshes the Node's status and Lease every heartbeat interval until ctx
// ends, registering the Node again if it was deleted.
func (r *Runner) heartbeat(ctx context.Context) {
	t := time.NewTicker(r.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.updateNodeStatus(ctx, true)
		if apierrors.IsNotFound(err) { // someone deleted the Node: register it again
			if err = r.ensureNode(ctx); err == nil {
				err = r.updateNodeStatus(ctx, true)
			}
		}
		if err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "node heartbeat")
		}
		if err := r.renewLease(ctx); err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "renew node lease")
		}
	}
}
