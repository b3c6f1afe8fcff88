package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

const adapter = "llama-3-8b-sql-lora"

// adapterLifecycle: an operator applies a ModelAdapter with kubectl, sees it READY, and
// clients use its name as a model on a route with a RoutingPolicy (the default route's
// plain routing does not read the model); once deleted, the gateway answers that its name
// is unknown.
func adapterLifecycle() {
	_, err := sys.kubectlApply(fmt.Sprintf(`apiVersion: inference.switchboard.dev/v1alpha1
kind: ModelAdapter
metadata:
  name: %s
  namespace: %s
spec:
  baseModel: %s
  artifactURL: file:///adapters/sql-lora
  podSelector:
    matchLabels:
      app: %s
`, adapter, ns, model, service))
	Expect(err).NotTo(HaveOccurred())

	Eventually(func(g Gomega) {
		out, err := sys.kubectl("get", "ma", adapter, "-n", ns)
		g.Expect(err).NotTo(HaveOccurred())
		ready, err := strconv.Atoi(cell(out, adapter, "READY"))
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(ready).To(BeNumerically(">=", 1), out)
		g.Expect(cell(out, adapter, "BASE")).To(Equal(model))
	}).Should(Succeed())

	// What the operator sees of everything the suite configured.
	const (
		gatewayAPI = ".gateway.networking.k8s.io/"
		switchAPI  = ".inference.switchboard.dev/"
	)
	var overview string
	Eventually(func(g Gomega) {
		out, err := sys.kubectl("get", "gatewayclass,gateway,httproute,rp,ma", "-A")
		g.Expect(err).NotTo(HaveOccurred())
		overview = out
		g.Expect(cell(out, "gatewayclass"+gatewayAPI+"switchboard", "ACCEPTED")).To(Equal("True"), out)
		g.Expect(cell(out, "gateway"+gatewayAPI+"gw", "PROGRAMMED")).To(Equal("True"), out)
		for _, route := range []string{"default", "broken", "rr", "sa", "lr", "live", "pc"} {
			g.Expect(cell(out, "httproute"+gatewayAPI+route, "NAMESPACE")).To(Equal(ns), out)
		}
		for name := range policies {
			g.Expect(cell(out, "routingpolicy"+switchAPI+name, "READY")).To(Equal("True"), out)
		}
		g.Expect(cell(out, "modeladapter"+switchAPI+adapter, "STATUS")).To(Equal("Loaded"), out)
	}).Should(Succeed())
	logf("$ kubectl get gatewayclass,gateway,httproute,rp,ma -A\n%s", overview)

	c := sys.client("lr")
	Eventually(func(g Gomega) {
		ep, err := ask(c, adapter, "List the ten largest orders.", 8)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(allPods).To(ContainElement(ep))
	}).Should(Succeed())

	_, err = sys.kubectl("delete", "ma", adapter, "-n", ns, "--timeout=30s")
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		_, err := ask(c, adapter, "List the ten largest orders.", 8)
		e := apiError(err)
		g.Expect(e).NotTo(BeNil(), "request for a deleted adapter: %v", err)
		g.Expect(e.StatusCode).To(Equal(http.StatusNotFound))
		g.Expect(e.Code).To(Equal("model_not_found"))
	}).Should(Succeed())
	_, err = ask(c, model, "the base model still serves", 4)
	Expect(err).NotTo(HaveOccurred())
}

// brokenRoute: the route "broken" names a RoutingPolicy that does not exist.
func brokenRoute() {
	Eventually(func(g Gomega) {
		out, err := sys.kubectl("get", "httproute", "broken", "-n", ns, "-o",
			`jsonpath={range .status.parents[*].conditions[?(@.type=="ResolvedRefs")]}{.status} {.reason}{end}`)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal("False RoutingPolicyNotFound"))
	}).Should(Succeed())
	_, err := ask(sys.client("broken"), model, "hello", 4)
	e := apiError(err)
	Expect(e).NotTo(BeNil(), "request on a route with a missing policy: %v", err)
	Expect(e.StatusCode).To(Equal(http.StatusInternalServerError))
	Expect(e.Code).To(Equal("invalid_route_filter"))
	Expect(e.Message).NotTo(BeEmpty())
	Expect(e.Type).NotTo(BeEmpty())
}

// sessionMovesOnce: the pod of a session is deleted; the session moves to one other pod
// and stays there, and sessions on the other pods do not move.
func sessionMovesOnce() {
	c := sys.client("sa")
	placed := map[string]string{}
	for i := range 9 {
		id := fmt.Sprintf("mover-%d", i)
		ep, err := ask(c, model, "where am I", 4, session(id))
		Expect(err).NotTo(HaveOccurred())
		placed[id] = ep
	}
	victim := placed["mover-0"]
	logf("sessions before %s is deleted: %v", victim, placed)
	_, err := sys.kubectl("delete", "pod", strings.TrimPrefix(victim, ns+"/"), "-n", ns, "--wait=false")
	Expect(err).NotTo(HaveOccurred())

	var moved string
	Eventually(func(g Gomega) {
		ep, err := ask(c, model, "where am I now", 4, session("mover-0"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ep).NotTo(Equal(victim))
		moved = ep
	}).Should(Succeed())
	for id, was := range placed {
		var seen []string
		for range 3 {
			ep, err := ask(c, model, "and now", 4, session(id))
			Expect(err).NotTo(HaveOccurred())
			seen = append(seen, ep)
		}
		switch {
		case id == "mover-0":
			Expect(seen).To(HaveEach(moved), "session %s after its move", id)
		case was == victim:
			Expect(seen).To(HaveEach(seen[0]), "session %s after its pod was deleted", id)
			Expect(seen[0]).NotTo(Equal(victim))
		default:
			Expect(seen).To(HaveEach(was), "session %s on a pod that stayed", id)
		}
	}
}

// engineCrashMidStream: the only engine of crash-model is killed while it streams; that
// client gets an error, the gateway releases the request, and other models still work.
// The requests take route lr, whose policy routes by model: the default route's plain
// routing would send crash-model requests to any pod of the Service.
func engineCrashMidStream() {
	// Started here rather than with testenv.Run, to kill it without a graceful shutdown.
	// Real time (--time-scale 1) makes the stream long: 2000 tokens take 30 s.
	addr := testenv.FreeAddr(GinkgoTB(), "127.0.0.24")
	cmd := exec.Command(sys.binary("engine-sim"), "--listen", addr, "--model", "crash-model", "--time-scale", "1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	Expect(cmd.Start()).To(Succeed())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	DeferCleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	Eventually(func() bool { return httpOK("http://" + addr + "/health") }).Should(BeTrue())
	crashPod := sys.cluster.EnginePod(GinkgoTB(), ns, "crash-0", "crash-model", addr, map[string]string{"app": service})
	DeferCleanup(func() { _ = sys.cluster.Delete(context.Background(), crashPod) })

	c := sys.client("lr")
	Eventually(func() error { _, err := ask(c, "crash-model", "ping", 2); return err }).Should(Succeed())

	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:     "crash-model",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Write a very long essay.")},
		MaxTokens: openai.Int(2000),
	})
	defer stream.Close()
	Expect(stream.Next()).To(BeTrue(), "first chunk: %v", stream.Err())
	Expect(cmd.Process.Kill()).To(Succeed())
	chunks := 1
	for stream.Next() {
		chunks++
	}
	logf("the stream ended after %d chunks with %v", chunks, stream.Err())
	Expect(stream.Err()).To(HaveOccurred(), "a stream cut by an engine crash ended without an error")
	Expect(ctx.Err()).NotTo(HaveOccurred(), "the stream did not end before the request timeout")

	Eventually(func(g Gomega) {
		text, err := sys.gatewayMetricsText()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(text).To(ContainSubstring("switchboard_gateway_requests_total"))
		g.Expect(text).To(ContainSubstring(`switchboard_gateway_in_flight{model="crash-model"} 0`))
	}).Should(Succeed())
	_, err := ask(c, model, "still there?", 4)
	Expect(err).NotTo(HaveOccurred())
	_, err = ask(c, "crash-model", "anyone?", 4)
	e := apiError(err)
	Expect(e).NotTo(BeNil(), "request for a model whose only engine crashed: %v", err)
	Expect(e.StatusCode).To(BeNumerically(">=", 500))
	logf("crash-model after the crash: %d %s", e.StatusCode, e.Code)
}

// twoReplicas: a second gateway process serves the same Gateway listener port on
// 127.0.0.2; both replicas answer, and place a new session on the same pod without
// sharing state.
func twoReplicas() {
	second := sys.startGatewayReplica(GinkgoTB(), "127.0.0.2")
	Eventually(second.ready).Should(BeTrue())
	Expect(second.listening()).To(BeTrue(), "a replica whose /readyz passes accepts connections")
	// Wait until the replica routes to every pod, so that both see the same candidates.
	pods := sys.routable(model)
	Expect(pods).NotTo(BeEmpty())
	rr2 := sys.clientOn("127.0.0.2", "rr")
	Eventually(func(g Gomega) {
		seen := map[string]bool{}
		for range len(pods) * 2 {
			ep, err := ask(rr2, model, "warm up", 2)
			g.Expect(err).NotTo(HaveOccurred())
			seen[ep] = true
		}
		g.Expect(seen).To(HaveLen(len(pods)))
	}).Should(Succeed())

	for _, host := range []string{"127.0.0.1", "127.0.0.2"} {
		c := sys.clientOn(host, "")
		for i := range 3 {
			_, err := ask(c, model, fmt.Sprintf("replica %s request %d", host, i), 4)
			Expect(err).NotTo(HaveOccurred(), "replica on %s", host)
		}
	}
	sa1, sa2 := sys.clientOn("127.0.0.1", "sa"), sys.clientOn("127.0.0.2", "sa")
	for i := range 6 {
		id := fmt.Sprintf("replicated-%d", i)
		ep1, err := ask(sa1, model, "hello", 2, session(id))
		Expect(err).NotTo(HaveOccurred())
		ep2, err := ask(sa2, model, "hello", 2, session(id))
		Expect(err).NotTo(HaveOccurred())
		Expect(ep2).To(Equal(ep1), "session %s on the two replicas", id)
	}
	Expect(second.Stop(GinkgoTB(), 20*time.Second)).To(Succeed(), "the second replica's exit after SIGTERM")
	_, err := ask(sys.client(""), model, "the first replica still serves", 4)
	Expect(err).NotTo(HaveOccurred())
}

// gatewayRestart: the gateway is stopped and started again with the same flags while a
// client sends requests one after another; requests fail only between the stop and the
// first success of the new process, and all succeed after it.
func gatewayRestart() {
	type result struct {
		at  time.Time
		err error
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	c := sys.client("")
	wg.Go(func() {
		deadline := time.Now().Add(2 * time.Minute)
		for i := 0; time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := ask(c, model, fmt.Sprintf("during the restart %d", i), 4)
			mu.Lock()
			results = append(results, result{time.Now(), err})
			mu.Unlock()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
	var once sync.Once
	halt := func() {
		once.Do(func() { close(stop) })
		wg.Wait()
	}
	defer halt()
	succeeded := func(after time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.err == nil && r.at.After(after) {
				n++
			}
		}
		return n
	}
	Eventually(func() int { return succeeded(time.Time{}) }).Should(BeNumerically(">=", 5))

	// A request in flight when SIGTERM arrives is drained, not cut: it is streamed by an
	// engine for about a second. It takes route lr, whose policy reads its model, so that
	// the model's in-flight gauge shows it.
	inFlight := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		lr := sys.client("lr")
		stream := lr.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:     model,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("A long answer, please.")},
			MaxTokens: openai.Int(1500),
		})
		defer stream.Close()
		for stream.Next() {
		}
		inFlight <- stream.Err()
	}()
	Eventually(func(g Gomega) {
		text, err := sys.gatewayMetricsText()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(text).To(MatchRegexp(`switchboard_gateway_in_flight\{model="` + model + `"\} [1-9]`))
	}).Should(Succeed())

	stoppedAt := time.Now()
	Expect(sys.gateway.Stop(GinkgoTB(), 20*time.Second)).To(Succeed(), "the gateway's exit after SIGTERM")
	Eventually(inFlight).Should(Receive(BeNil()), "the streaming request in flight at SIGTERM")
	restartedAt := time.Now()
	sys.gateway = testenv.Run(sys.suite, sys.binary("gateway"), sys.gatewayArgs...)
	Eventually(func() bool { return httpOK("http://" + sys.gatewayProbes + "/readyz") }).Should(BeTrue())
	Eventually(func() int { return succeeded(restartedAt) }).Should(BeNumerically(">=", 10))
	halt()

	var firstOK time.Time
	for _, r := range results {
		if r.err == nil && r.at.After(restartedAt) {
			firstOK = r.at
			break
		}
	}
	failed := 0
	for _, r := range results {
		if r.err == nil {
			continue
		}
		failed++
		Expect(r.at).To(BeTemporally(">=", stoppedAt), "a request failed before the stop: %v", r.err)
		Expect(r.at).To(BeTemporally("<=", firstOK), "a request failed after the new gateway served: %v", r.err)
	}
	logf("restart: %d requests, %d failed while the gateway was down for %v; stop took %v",
		len(results), failed, firstOK.Sub(restartedAt).Round(time.Millisecond), restartedAt.Sub(stoppedAt).Round(time.Millisecond))
}

// kubectlApply applies manifest with the real kubectl.
func (s *system) kubectlApply(manifest string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Kubectl(), "--kubeconfig", s.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return string(out), nil
}
