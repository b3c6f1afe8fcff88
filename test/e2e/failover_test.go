package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// leaseFlags time the leader election of the suite's managers: a standby takes over
// within seconds of the leader's death.
var leaseFlags = []string{"--leader-election-lease-duration", "6s",
	"--leader-election-renew-deadline", "4s", "--leader-election-retry-period", "500ms"}

// leaderSeries is the metric series with which a manager reports that it leads.
const leaderSeries = `leader_election_master_status{name="switchboard-manager.inference.switchboard.dev"} 1`

// managerReplica is a running manager process and the addresses it serves.
type managerReplica struct {
	*testenv.Process
	probes, metrics string
}

// startManager runs a manager replica, with further flags, until the test ends.
func (s *system) startManager(t testing.TB, flags ...string) *managerReplica {
	m := &managerReplica{probes: testenv.FreeAddr(t, "127.0.0.1"), metrics: testenv.FreeAddr(t, "127.0.0.1")}
	args := []string{"--kubeconfig", s.kubeconfig,
		"--leader-election-namespace", "switchboard-system", "--gateway-status-endpoints", s.gatewayMetrics,
		"--metrics-bind-address", m.metrics, "--health-probe-bind-address", m.probes}
	m.Process = testenv.Run(t, s.binary("manager"), slices.Concat(args, leaseFlags, flags)...)
	return m
}

// ready reports whether the replica's cache has synced.
func (m *managerReplica) ready() bool { return httpOK("http://" + m.probes + "/readyz") }

// leading reports whether the replica says, on /metrics, that it leads.
func (m *managerReplica) leading() bool {
	text, err := metricsText(m.metrics)
	return err == nil && strings.Contains(text, leaderSeries)
}

// adapterLog remembers when each ModelAdapter's deletion was asked for.
type adapterLog struct {
	mu        sync.Mutex
	deletedAt map[string]time.Time
}

// createAdapter creates ModelAdapter name for model on the pods labelled app=app.
func createAdapter(t testing.TB, name, model, app string) {
	sys.cluster.Create(t, &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ModelAdapterSpec{
			BaseModel:   model,
			ArtifactURL: "file:///adapters/" + name,
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	})
}

// deleteAll deletes every ModelAdapter of base model and waits up to timeout until their
// finalizers let them go; one still there is described in the failure.
func (l *adapterLog) deleteAll(base string, timeout time.Duration) {
	var list v1alpha1.ModelAdapterList
	Expect(sys.cluster.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
	for _, ma := range list.Items {
		if ma.Spec.BaseModel == base && ma.DeletionTimestamp.IsZero() {
			Expect(l.delete(ma.Name)).To(Succeed())
		}
	}
	Eventually(func(g Gomega) {
		g.Expect(sys.cluster.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
		for _, ma := range list.Items {
			if ma.Spec.BaseModel == base {
				described, _ := sys.kubectl("describe", "modeladapter", ma.Name, "-n", ns)
				g.Expect(ma.Spec.BaseModel).NotTo(Equal(base), "ModelAdapter %s is still there:\n%s", ma.Name, described)
			}
		}
	}, timeout).Should(Succeed())
}

// delete asks for ModelAdapter name's deletion, noting when.
func (l *adapterLog) delete(name string) error {
	l.mu.Lock()
	if l.deletedAt == nil {
		l.deletedAt = map[string]time.Time{}
	}
	l.deletedAt[name] = time.Now()
	l.mu.Unlock()
	ma := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return client.IgnoreNotFound(sys.cluster.Delete(context.Background(), ma))
}

// unexpectedUnloads returns the unloads e was asked for, other than those of an adapter
// whose deletion had been asked for.
func (l *adapterLog) unexpectedUnloads(e *tappedEngine) []adminCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var bad []adminCall
	for _, u := range e.unloadCalls() {
		if at, ok := l.deletedAt[u.adapter]; !ok || u.at.Before(at) {
			bad = append(bad, u)
		}
	}
	return bad
}

// convergeTimeout bounds the wait for ModelAdapters to converge: longer than the
// manager's resync period, after which it re-reads every adapter whatever it missed.
const convergeTimeout = time.Minute

// convergedAdapters checks that every ModelAdapter of model is loaded on every pod that
// wantPods names, says so in its status, and that the engines list exactly those.
func convergedAdapters(g Gomega, model string, engines []*tappedEngine, wantPods []string) {
	var list v1alpha1.ModelAdapterList
	g.Expect(sys.cluster.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
	want := []string{model}
	for _, ma := range list.Items {
		if ma.Spec.BaseModel != model {
			continue
		}
		g.Expect(ma.DeletionTimestamp).To(BeNil(), "ModelAdapter %s is still being deleted", ma.Name)
		g.Expect(ma.Status.Instances).To(ConsistOf(wantPods), "instances of ModelAdapter %s (conditions %+v)", ma.Name, ma.Status.Conditions)
		g.Expect(meta.IsStatusConditionTrue(ma.Status.Conditions, v1alpha1.ModelAdapterConditionReady)).
			To(BeTrue(), "ModelAdapter %s is Ready", ma.Name)
		want = append(want, ma.Name)
	}
	for _, e := range engines {
		models, err := e.models()
		g.Expect(err).NotTo(HaveOccurred())
		extra := slices.DeleteFunc(slices.Clone(models), func(m string) bool { return slices.Contains(want, m) })
		g.Expect(extra).To(BeEmpty(), "adapters left on the engine on %s; the calls for them:\n%v", e.host, e.callsFor(extra))
		g.Expect(models).To(ConsistOf(want), "models of the engine on %s", e.host)
	}
}

// managerFailover: a second manager replica stands by while ModelAdapters are created and
// deleted and a pod flaps; the leader is killed (SIGKILL) and the standby takes over. Every
// adapter converges, and none is unloaded from a pod that stayed Ready — in particular
// not from a pod that was NotReady when the standby started and turned Ready before the
// failover, which a standby acting on its first listing would drop.
func managerFailover() {
	const base = "failover-llama"
	const app = "failover"
	var engines []*tappedEngine
	var pods []*corev1.Pod
	for i, host := range []string{"127.0.0.61", "127.0.0.62", "127.0.0.63"} {
		e := sys.startTappedEngine(GinkgoTB(), host, base, "--max-loras", "16")
		engines = append(engines, e)
		// The last pod is registered NotReady: were it Ready for a moment, the leader
		// could load an adapter there and, rightly, unload it when it saw it NotReady.
		pods = append(pods, e.pod(GinkgoTB(), ns, fmt.Sprintf("failover-%d", i), map[string]string{"app": app}, i < 2))
	}
	steady, flapping, late := pods[0], pods[1], pods[2]

	var adapters adapterLog
	kept := []string{"failover-kept-0", "failover-kept-1"}
	DeferCleanup(func() {
		adapters.deleteAll(base, 30*time.Second)
		for _, p := range pods {
			_ = sys.cluster.Delete(context.Background(), p)
		}
	})
	for _, name := range kept {
		createAdapter(GinkgoTB(), name, base, app)
	}
	Eventually(func(g Gomega) {
		convergedAdapters(g, base, engines[:2], []string{steady.Name, flapping.Name})
	}, convergeTimeout).Should(Succeed())

	// The standby starts, and lists the pods, while the last pod is NotReady; then the
	// pod turns Ready and the leader loads every adapter onto it.
	// The standby logs each adapter load it makes (at debug level), for a failure to
	// tell which of its loads left an adapter behind.
	standby := sys.startManager(sys.suite, "--zap-log-level", "debug")
	Eventually(standby.ready).Should(BeTrue())
	Expect(standby.leading()).To(BeFalse(), "the second replica leads while the first runs")
	sys.cluster.SetPodReady(GinkgoTB(), late, engines[2].host, true)
	Eventually(func(g Gomega) { convergedAdapters(g, base, engines, podNames(pods)) }, convergeTimeout).Should(Succeed())

	// Churn: adapters come and go and one pod flaps, before and after the leader dies.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rounds atomic.Int64
	wg.Go(func() {
		defer GinkgoRecover()
		for i := 0; ; i++ {
			rounds.Store(int64(i))
			name := fmt.Sprintf("failover-churn-%d", i)
			createAdapter(GinkgoTB(), name, base, app)
			sys.cluster.SetPodReady(GinkgoTB(), flapping, engines[1].host, i%2 == 1)
			if i > 0 {
				Expect(adapters.delete(fmt.Sprintf("failover-churn-%d", i-1))).To(Succeed())
			}
			select {
			case <-stop:
				sys.cluster.SetPodReady(GinkgoTB(), flapping, engines[1].host, true)
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	})
	Eventually(rounds.Load).Should(BeNumerically(">=", 5), "churn before the failover")
	leader := sys.manager
	Expect(leader.leading()).To(BeTrue(), "the suite's manager leads")
	leader.Kill(GinkgoTB())
	Eventually(standby.leading).Should(BeTrue(), "the standby takes over")
	sys.manager = standby
	after := rounds.Load()
	Eventually(rounds.Load).Should(BeNumerically(">=", after+5), "churn after the failover")
	close(stop)
	wg.Wait()

	Eventually(func(g Gomega) { convergedAdapters(g, base, engines, podNames(pods)) }, convergeTimeout).Should(Succeed())
	for i, e := range engines {
		if pods[i] == flapping {
			continue
		}
		Expect(adapters.unexpectedUnloads(e)).To(BeEmpty(), "adapters unloaded from %s, which stayed Ready", pods[i].Name)
	}
}

// podNames returns the names of pods.
func podNames(pods []*corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}
