package cache

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestStandbyCacheFollowsPods runs the manager's cache context in a manager that never
// becomes leader, because another holder keeps the Lease, and checks that its pod view
// follows the API server all the same: a standby that takes over must not act on the
// pods it first listed.
func TestStandbyCacheFollowsPods(t *testing.T) {
	c := testenv.Start(t)
	const ns, leaseName = "standby", "standby-manager"
	now := metav1.NewMicroTime(time.Now())
	c.Create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaseName},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To("another-replica"),
				LeaseDurationSeconds: ptr.To[int32](3600),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		})
	pod := c.EnginePod(t, ns, "llama-0", "llama", "127.0.0.61:8000", nil)

	var (
		mgr  ctrl.Manager
		view *Manager
	)
	c.RunManagerWith(t, ctrl.Options{
		LeaderElection: true, LeaderElectionID: leaseName, LeaderElectionNamespace: ns,
	}, func(m ctrl.Manager) (err error) {
		mgr = m
		view, err = InitForManager(m)
		return err
	})
	waitUntil(t, "the standby's cache syncs", view.Synced)
	if got := podNames(view.Reader, "llama"); !slices.Equal(got, []string{"llama-0"}) {
		t.Fatalf("standby cache right after sync: endpoints of llama = %v, want [llama-0]", got)
	}

	c.SetPodReady(t, pod, "127.0.0.61", false)
	waitUntil(t, "the standby sees llama-0 turn NotReady", func() bool {
		p, ok := view.Pod(endpoint.Key{Namespace: ns, Name: "llama-0"})
		return ok && !p.Routable()
	})
	c.EnginePod(t, ns, "llama-1", "llama", "127.0.0.62:8000", nil)
	waitUntil(t, "the standby sees llama-1 join", func() bool {
		return slices.Equal(podNames(view.Reader, "llama"), []string{"llama-1"})
	})

	select {
	case <-mgr.Elected():
		t.Fatal("the manager became leader; the test needs a standby")
	default:
	}
}
