package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// Soak settings.
const (
	soakModel   = "soak-llama"
	soakApp     = "soak"
	soakWorkers = 6
	// soakGrace is how long after a pod or its engine recovers an unload from it still
	// counts as expected: the manager acts on events, which reach it a little later.
	soakGrace = 5 * time.Second
	// Bounds within which the primary gateway's goroutines and resident memory return to
	// their baseline after the soak.
	soakGoroutineSlack = 50
	soakRSSFactor      = 1.5
	soakRSSSlack       = 32 << 20
)

// soakDuration is how long the soak runs traffic: SOAK_DURATION (default ten minutes)
// when SWITCHBOARD_SOAK=1, which make soak sets, and zero otherwise.
func soakDuration() time.Duration {
	if os.Getenv("SWITCHBOARD_SOAK") != "1" {
		return 0
	}
	if d, err := time.ParseDuration(os.Getenv("SOAK_DURATION")); err == nil && d > 0 {
		return d
	}
	return 10 * time.Minute
}

// soak: for soakDuration, mixed streaming and non-streaming chat completions, of a base
// model and its ModelAdapters, through two gateway replicas while pods flap and are
// replaced, adapters come and go, engines crash and restart, the API server restarts,
// the manager's leader is killed and a gateway replica is rolled. Every request succeeds
// or gets an OpenAI-shaped error within its deadline, no stream is cut silently, the
// gateways' in-flight and queued gauges return to 0, the primary gateway's goroutines
// and memory return to their baseline, and no adapter is unloaded from a healthy pod.
// SOAK_REPORT names a file to write the counts to, as markdown.
func soak() {
	d := soakDuration()
	if d == 0 {
		Skip("the soak runs with SWITCHBOARD_SOAK=1 (make soak)")
	}
	sk := startSoak()
	sk.traffic(10 * time.Second)
	base := sk.gatewayResources()
	logf("baseline of the primary gateway: %d goroutines, %.1f MiB resident", base.goroutines, testenv.MiB(base.rss))

	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer GinkgoRecover()
		sk.chaos(stop)
	})
	sk.traffic(d)
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()

	// The checks after the run note their failures, so that the report shows the counts
	// whatever they find.
	var failures []string
	check := NewGomega(func(message string, _ ...int) { failures = append(failures, message) })
	sk.settle(check)
	var end resources
	check.Eventually(func(g Gomega) {
		end = sk.gatewayResources()
		g.Expect(end.goroutines).To(BeNumerically("<=", base.goroutines+soakGoroutineSlack), "goroutines of the primary gateway")
		g.Expect(float64(end.rss)).To(BeNumerically("<=", soakRSSFactor*float64(base.rss)+soakRSSSlack), "resident memory of the primary gateway")
	}, 2*time.Minute, time.Second).Should(Succeed())
	check.Eventually(func(g Gomega) {
		convergedAdapters(g, soakModel, sk.engines, podNames(sk.pods))
	}, convergeTimeout).Should(Succeed())
	unexpected := sk.unexpectedUnloads()

	report := sk.report(elapsed, base, end, append(failures, unexpected...))
	fmt.Fprintln(GinkgoWriter, report)
	AddReportEntry("soak", report)
	if path := os.Getenv("SOAK_REPORT"); path != "" {
		Expect(os.WriteFile(path, []byte(report), 0o644)).To(Succeed())
	}
	Expect(sk.tally.unshaped).To(BeEmpty(), "requests that neither succeeded nor got an OpenAI-shaped error")
	Expect(unexpected).To(BeEmpty(), "adapters unloaded from healthy pods")
	Expect(failures).To(BeEmpty())
}

// soakRun is the soak's system and what it observed. The chaos goroutine alone changes
// pods, engines, managers and the second gateway; traffic only reads the rotation.
type soakRun struct {
	engines  []*tappedEngine
	pods     []*corev1.Pod // the current pod of each engine
	adapters adapterLog
	kept     []string // adapters that live through the soak
	churned  []string // live adapters the chaos deletes in turn
	made     int      // adapters the chaos created

	gateways []*gatewayReplica // the primary, never rolled, and the second replica
	rotation rotation
	managers []*managerReplica

	mu        sync.Mutex
	disturbed map[*tappedEngine][]interval // when each engine's pod was not healthy
	events    map[string]int               // chaos events by kind
	tally     tally
}

// interval is a span of time.
type interval struct{ from, to time.Time }

// startSoak starts the soak's engines, pods, Service, RoutingPolicy, HTTPRoute and
// ModelAdapters, a second gateway replica and a second manager replica, and waits until
// both replicas serve every model.
func startSoak() *soakRun {
	sk := &soakRun{disturbed: map[*tappedEngine][]interval{}, events: map[string]int{},
		tally: tally{codes: map[string]int{}}}
	for i, host := range []string{"127.0.0.64", "127.0.0.65", "127.0.0.66", "127.0.0.67"} {
		e := sys.startTappedEngine(GinkgoTB(), host, soakModel, "--max-loras", "16", "--time-scale", "0.2")
		sk.engines = append(sk.engines, e)
		sk.pods = append(sk.pods, e.pod(GinkgoTB(), ns, fmt.Sprintf("soak-%d", i), map[string]string{"app": soakApp}, true))
	}
	route := httpRoute(soakApp, soakApp, soakApp)
	route.Spec.Rules[0].BackendRefs[0].Name = soakApp
	sys.cluster.Create(GinkgoTB(), testenv.EngineService(ns, soakApp, map[string]string{"app": soakApp}), route,
		&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: soakApp},
			Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}})
	sk.kept = []string{"soak-lora-kept-0", "soak-lora-kept-1"}
	for _, name := range sk.kept {
		createAdapter(GinkgoTB(), name, soakModel, soakApp)
	}
	sk.churnAdapter()

	primary := &gatewayReplica{Process: sys.gateway, host: gatewayAddr, metrics: sys.gatewayMetrics, probes: sys.gatewayProbes, http: newHTTPClient()}
	second := sys.startGatewayReplica(GinkgoTB(), "127.0.0.2")
	sk.gateways = []*gatewayReplica{primary, second}
	sk.managers = []*managerReplica{sys.manager, sys.startManager(sys.suite)}
	Eventually(func(g Gomega) {
		convergedAdapters(g, soakModel, sk.engines, podNames(sk.pods))
	}, convergeTimeout).Should(Succeed())
	for _, gw := range sk.gateways {
		Eventually(gw.ready).Should(BeTrue())
		Eventually(func(g Gomega) {
			for _, m := range append([]string{soakModel}, sk.liveAdapters()...) {
				g.Expect(sk.request(gw, m, false, 4).code).To(BeEmpty(), "%s on the replica on %s", m, gw.host)
			}
		}).Should(Succeed())
		sk.rotation.add(gw)
	}
	DeferCleanup(sk.cleanup)
	return sk
}

// cleanup deletes the soak's adapters, pods, route, policy and Service.
func (sk *soakRun) cleanup() {
	sk.adapters.deleteAll(soakModel, convergeTimeout)
	objs := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: soakApp}},
		&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: soakApp}},
		httpRoute(soakApp, soakApp, soakApp),
	}
	for _, p := range sk.pods {
		objs = append(objs, p)
	}
	for _, o := range objs {
		Expect(client.IgnoreNotFound(sys.cluster.Delete(context.Background(), o))).To(Succeed())
	}
}

// liveAdapters returns the soak's adapters that are not being deleted.
func (sk *soakRun) liveAdapters() []string {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	return append(slices.Clone(sk.kept), sk.churned...)
}

// traffic sends requests from soakWorkers clients, one after another each, for d.
func (sk *soakRun) traffic(d time.Duration) {
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range soakWorkers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for time.Now().Before(deadline) {
				m := soakModel
				if rng.IntN(4) == 0 {
					m = sk.kept[rng.IntN(len(sk.kept))]
				}
				gw := sk.rotation.pick(rng)
				r := sk.request(gw, m, rng.IntN(2) == 0, 8+rng.Int64N(120))
				gw.done()
				sk.tally.add(r)
				time.Sleep(time.Duration(10+rng.IntN(30)) * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// result is what one request of the soak got.
type result struct {
	stream bool
	// code is empty for a success, the status and OpenAI error code of an OpenAI-shaped
	// error, or "unshaped".
	code string
	// err describes an unshaped failure.
	err error
}

// request sends one chat completion through gw, streamed or not, and classifies it.
func (sk *soakRun) request(gw *gatewayReplica, model string, stream bool, maxTokens int64) result {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	params := openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("Soak %d, tell me a story.", maxTokens))},
		MaxTokens: openai.Int(maxTokens),
	}
	c := gw.client(soakApp)
	if !stream {
		completion, err := c.Chat.Completions.New(ctx, params)
		if err == nil && (len(completion.Choices) == 0 || completion.Choices[0].FinishReason == "") {
			err = errors.New("a completion without a finished choice")
		}
		return classify(false, err)
	}
	s := c.Chat.Completions.NewStreaming(ctx, params)
	defer s.Close()
	finished := false
	for s.Next() {
		for _, ch := range s.Current().Choices {
			finished = finished || ch.FinishReason != ""
		}
	}
	err := s.Err()
	if err == nil && !finished {
		err = errors.New("a stream that ended without a finish_reason: truncated")
	}
	return classify(true, err)
}

// classify returns the result of a request that ended with err.
func classify(stream bool, err error) result {
	r := result{stream: stream}
	var streamErr *ssestream.StreamError
	switch {
	case err == nil:
	case apiError(err) != nil && apiError(err).Code != "":
		e := apiError(err)
		r.code = fmt.Sprintf("%d %s", e.StatusCode, e.Code)
	case errors.As(err, &streamErr):
		var event struct {
			Error struct{ Code, Type, Message string }
		}
		if json.Unmarshal(streamErr.Event.Data, &event) == nil && event.Error.Code != "" && event.Error.Message != "" {
			r.code = "in-stream " + event.Error.Code
		} else {
			r.code, r.err = "unshaped", err
		}
	default:
		r.code, r.err = "unshaped", err
	}
	return r
}

// tally counts the soak's results.
type tally struct {
	mu                sync.Mutex
	requests, streams int
	codes             map[string]int
	// unshaped describes the first unshaped failures.
	unshaped []string
}

// add counts r.
func (t *tally) add(r result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	if r.stream {
		t.streams++
	}
	if r.code == "" {
		return
	}
	t.codes[r.code]++
	if r.err != nil && len(t.unshaped) < 20 {
		t.unshaped = append(t.unshaped, fmt.Sprintf("%s (stream %t)", r.err, r.stream))
	}
}

// rotation is the set of gateway replicas that clients send requests to, as a load
// balancer in front of the replicas keeps it: a replica leaves it before it stops.
type rotation struct {
	mu sync.Mutex
	in []*gatewayReplica
}

// pick returns a replica in rotation for a request; the caller calls its done when the
// request has ended.
func (r *rotation) pick(rng *rand.Rand) *gatewayReplica {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.in[rng.IntN(len(r.in))]
	g.inFlight.Add(1)
	return g
}

// add puts g in rotation.
func (r *rotation) add(g *gatewayReplica) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.in = append(r.in, g)
}

// remove takes g out of rotation.
func (r *rotation) remove(g *gatewayReplica) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.in = slices.DeleteFunc(r.in, func(x *gatewayReplica) bool { return x == g })
}

// chaos disturbs the system, one event after another, until stop is closed.
func (sk *soakRun) chaos(stop <-chan struct{}) {
	steps := []struct {
		kind string
		do   func(i int)
	}{
		{"pod NotReady for 2s", sk.flapPod},
		{"adapter created, another deleted", func(int) { sk.churnAdapter() }},
		{"engine crashed and restarted", sk.crashEngine},
		{"pod replaced", sk.replacePod},
		{"manager leader killed", func(int) { sk.killLeader() }},
		{"API server restarted", func(int) { sys.cluster.RestartAPIServer(GinkgoTB(), time.Second) }},
		{"gateway replica rolled", func(int) { sk.rollGateway() }},
	}
	for i := 0; ; i++ {
		step := steps[i%len(steps)]
		step.do(i / len(steps))
		sk.replaceExitedManagers()
		sk.mu.Lock()
		sk.events[step.kind]++
		sk.mu.Unlock()
		select {
		case <-stop:
			return
		case <-time.After(3 * time.Second):
		}
	}
}

// disturbing runs change, which makes the pod of engine e unhealthy for a while, and
// records when.
func (sk *soakRun) disturbing(e *tappedEngine, change func()) {
	from := time.Now()
	change()
	sk.mu.Lock()
	sk.disturbed[e] = append(sk.disturbed[e], interval{from, time.Now().Add(soakGrace)})
	sk.mu.Unlock()
}

// flapPod makes the pod of engine i NotReady for two seconds.
func (sk *soakRun) flapPod(i int) {
	i %= len(sk.engines)
	e := sk.engines[i]
	sk.disturbing(e, func() {
		sys.cluster.SetPodReady(GinkgoTB(), sk.pods[i], e.host, false)
		time.Sleep(2 * time.Second)
		sys.cluster.SetPodReady(GinkgoTB(), sk.pods[i], e.host, true)
	})
}

// replacePod deletes the pod of engine i and registers a new one for it, as a
// ReplicaSet replaces a deleted pod.
func (sk *soakRun) replacePod(i int) {
	i %= len(sk.engines)
	e := sk.engines[i]
	sk.disturbing(e, func() {
		Expect(sys.cluster.Delete(context.Background(), sk.pods[i])).To(Succeed())
		sk.pods[i] = e.pod(GinkgoTB(), ns, fmt.Sprintf("soak-%d-%d", i, time.Now().UnixMilli()), map[string]string{"app": soakApp}, true)
	})
}

// crashEngine kills engine i; as a kubelet's readiness probe would, its pod turns
// NotReady a second later, and Ready again once the restarted engine is healthy.
func (sk *soakRun) crashEngine(i int) {
	i %= len(sk.engines)
	e := sk.engines[i]
	sk.disturbing(e, func() {
		e.crash(GinkgoTB())
		time.Sleep(time.Second)
		sys.cluster.SetPodReady(GinkgoTB(), sk.pods[i], e.host, false)
		// The suite's, not the spec's: cleanups run last-registered first, and the soak's
		// cleanup deletes its adapters while their engines still answer, as it must for
		// their finalizers to unload them.
		e.restart(sys.suite)
		sys.cluster.SetPodReady(GinkgoTB(), sk.pods[i], e.host, true)
	})
}

// churnAdapter creates an adapter and deletes the oldest churned one, keeping two.
func (sk *soakRun) churnAdapter() {
	name := fmt.Sprintf("soak-lora-%d", sk.made)
	sk.made++
	createAdapter(GinkgoTB(), name, soakModel, soakApp)
	sk.mu.Lock()
	sk.churned = append(sk.churned, name)
	var old string
	if len(sk.churned) > 2 {
		old, sk.churned = sk.churned[0], sk.churned[1:]
	}
	sk.mu.Unlock()
	if old != "" {
		Expect(sk.adapters.delete(old)).To(Succeed())
	}
}

// killLeader kills (SIGKILL) the manager replica that leads, waits until another
// leads, and starts a replacement, as a Deployment would.
func (sk *soakRun) killLeader() {
	var leader *managerReplica
	Eventually(func() bool {
		for _, m := range sk.managers {
			if m.leading() {
				leader = m
				return true
			}
		}
		return false
	}).Should(BeTrue(), "a manager replica leads")
	leader.Kill(GinkgoTB())
	Eventually(func() bool {
		for _, m := range sk.managers {
			if m != leader && m.leading() {
				return true
			}
		}
		return false
	}).Should(BeTrue(), "a standby takes over")
}

// replaceExitedManagers starts a replica in place of every one that exited: killed, or
// stopped because it could not renew its lease while the API server was down.
func (sk *soakRun) replaceExitedManagers() {
	for i, m := range sk.managers {
		if m.Exited() {
			sk.managers[i] = sys.startManager(sys.suite)
			sk.mu.Lock()
			sk.events["manager replica replaced"]++
			sk.mu.Unlock()
		}
	}
	for _, m := range sk.managers {
		Eventually(m.ready).Should(BeTrue())
	}
	sys.manager = sk.managers[0]
}

// rollGateway replaces the second gateway replica: it leaves the rotation, gets a
// second for requests already sent to it to arrive, drains on SIGTERM, and a new process
// with the same flags joins the rotation once ready.
func (sk *soakRun) rollGateway() {
	g := sk.gateways[1]
	sk.rotation.remove(g)
	time.Sleep(time.Second)
	Expect(g.Stop(GinkgoTB(), 20*time.Second)).To(Succeed(), "the gateway replica's exit after SIGTERM")
	g.inFlight.Wait()
	g.http.CloseIdleConnections()
	g.Process = testenv.Run(GinkgoTB(), sys.binary("gateway"), g.args...)
	Eventually(g.ready).Should(BeTrue())
	Expect(g.listening()).To(BeTrue(), "a replica whose /readyz passes accepts connections")
	sk.rotation.add(g)
}

// settle waits until both manager replicas run, then checks with check that every
// engine is healthy and that the gateways' in-flight and queued gauges are back to 0.
func (sk *soakRun) settle(check Gomega) {
	sk.replaceExitedManagers()
	for i, e := range sk.engines {
		check.Expect(httpOK("http://"+e.engine+"/health")).To(BeTrue(), "engine %d", i)
	}
	for _, gw := range sk.gateways {
		gw.http.CloseIdleConnections()
		check.Eventually(func(g Gomega) {
			fams, err := families(gw.metrics)
			g.Expect(err).NotTo(HaveOccurred())
			for _, name := range []string{"switchboard_gateway_in_flight", "switchboard_gateway_queued", "switchboard_gateway_endpoint_in_flight"} {
				for _, m := range fams[name].GetMetric() {
					g.Expect(m.GetGauge().GetValue()).To(BeZero(), "%s %v on the replica on %s", name, m.GetLabel(), gw.host)
				}
			}
		}).Should(Succeed())
	}
}

// unexpectedUnloads returns the unloads of adapters not being deleted from pods that
// were healthy then, by engine.
func (sk *soakRun) unexpectedUnloads() []string {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	return sk.unexpectedUnloadsLocked()
}

// unexpectedUnloadsLocked is unexpectedUnloads for a caller that holds sk.mu.
func (sk *soakRun) unexpectedUnloadsLocked() []string {
	var bad []string
	for _, e := range sk.engines {
		for _, u := range sk.adapters.unexpectedUnloads(e) {
			if !slices.ContainsFunc(sk.disturbed[e], func(iv interval) bool { return !u.at.Before(iv.from) && !u.at.After(iv.to) }) {
				bad = append(bad, fmt.Sprintf("%s from the engine on %s at %s", u.adapter, e.host, u.at.Format(time.StampMilli)))
			}
		}
	}
	return bad
}

// resources are a process's goroutines and resident memory.
type resources struct {
	goroutines int
	rss        uint64
}

// gatewayResources returns the primary gateway's resources once it has no request in
// flight and the clients' idle connections to it are closed.
func (sk *soakRun) gatewayResources() resources {
	gw := sk.gateways[0]
	gw.http.CloseIdleConnections()
	var r resources
	Eventually(func(g Gomega) {
		fams, err := families(gw.metrics)
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range fams["switchboard_gateway_in_flight"].GetMetric() {
			g.Expect(m.GetGauge().GetValue()).To(BeZero())
		}
		r.goroutines = int(fams["go_goroutines"].GetMetric()[0].GetGauge().GetValue())
		r.rss = uint64(fams["process_resident_memory_bytes"].GetMetric()[0].GetGauge().GetValue())
	}).Should(Succeed())
	return r
}

// families returns the metric families served on addr.
func families(addr string) (map[string]*dto.MetricFamily, error) {
	text, err := metricsText(addr)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	return parser.TextToMetricFamilies(strings.NewReader(text))
}

// counter returns the sum of the series of the counter name on the replicas.
func (sk *soakRun) counter(name string) float64 {
	var sum float64
	for _, gw := range sk.gateways {
		fams, err := families(gw.metrics)
		if err != nil {
			continue
		}
		for _, m := range fams[name].GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// report returns the soak's counts and the failed checks as markdown.
func (sk *soakRun) report(elapsed time.Duration, base, end resources, failed []string) string {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	t := &sk.tally
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, `# Soak

Written by `+"`make soak`"+` (test/e2e, the spec labelled soak; SOAK_DURATION sets the length,
default 10m). %d clients send streamed and plain chat completions, of a base model and of its
ModelAdapters, through two gateway replicas to %d engine-sim pods, while a chaos loop, every
3s, in turn: makes a pod NotReady for 2s; creates a ModelAdapter and deletes another; crashes
an engine (SIGKILL; its pod turns NotReady, and Ready once it is back); replaces a pod; kills
(SIGKILL) the manager replica that leads; restarts the kube-apiserver; and rolls the second
gateway replica (out of rotation, SIGTERM and drain, a new process). Manager replicas that
exit are replaced, as a Deployment would.

The run fails unless every request succeeds or gets an OpenAI-shaped error before its
deadline (none hangs; no stream ends without a finish_reason or an error event), the
gateways' in-flight and queued gauges return to 0, the primary gateway's goroutines and
resident memory return to within the bounds below of their baseline, every ModelAdapter
converges, and no adapter is unloaded from a pod that was healthy.

Last run: %s, %v of traffic.

`, soakWorkers, len(sk.engines), time.Now().UTC().Format("2006-01-02 15:04 MST"), elapsed.Round(time.Second))
	b.WriteString("| requests | of them streamed | succeeded | OpenAI-shaped errors | unshaped |\n|---:|---:|---:|---:|---:|\n")
	errs := 0
	for code, n := range t.codes {
		if code != "unshaped" {
			errs += n
		}
	}
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d |\n\n", t.requests, t.streams, t.requests-errs-t.codes["unshaped"], errs, t.codes["unshaped"])
	b.WriteString("Errors by code (HTTP status and `error.code`; *in-stream* is an error event ending a started stream):\n\n")
	b.WriteString("| error | count |\n|---|---:|\n")
	for _, code := range slices.Sorted(maps.Keys(t.codes)) {
		fmt.Fprintf(&b, "| %s | %d |\n", code, t.codes[code])
	}
	b.WriteString("\nChaos events:\n\n| event | count |\n|---|---:|\n")
	for _, kind := range slices.Sorted(maps.Keys(sk.events)) {
		fmt.Fprintf(&b, "| %s | %d |\n", kind, sk.events[kind])
	}
	unloads := 0
	for _, e := range sk.engines {
		unloads += len(e.unloadCalls())
	}
	unexpected := len(sk.unexpectedUnloadsLocked())
	fmt.Fprintf(&b, "\n- Endpoint ejections (outlier detection, both replicas; the rolled replica's since its\n"+
		"  last start): %.0f.\n"+
		"- Gateway retries on another endpoint (both replicas, counted the same way): %.0f.\n"+
		"- Adapter unloads the engines were asked for: %d, of them from a healthy pod: %d.\n",
		sk.counter("switchboard_gateway_ejections_total"), sk.counter("switchboard_gateway_retries_total"), unloads, unexpected)
	fmt.Fprintf(&b, "- Primary gateway: %d goroutines and %.1f MiB resident after warm-up, %d and %.1f MiB\n"+
		"  after the soak (bounds: +%d goroutines, ×%.1f + %d MiB).\n", base.goroutines, testenv.MiB(base.rss), end.goroutines, testenv.MiB(end.rss),
		soakGoroutineSlack, soakRSSFactor, soakRSSSlack>>20)
	failed = append(failed, t.unshaped...)
	if len(failed) == 0 {
		b.WriteString("\nEvery check held.\n")
	}
	for _, f := range failed {
		fmt.Fprintf(&b, "\nFailed: %s\n", f)
	}
	return b.String()
}
