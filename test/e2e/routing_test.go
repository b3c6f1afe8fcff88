package e2e

import (
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// allPods are the endpoints of the three engine pods.
var allPods = []string{pod("llama-0"), pod("llama-1"), pod("llama-2")}

// roundRobinCycles: sequential requests visit the three pods in turn, repeating the cycle.
func roundRobinCycles() {
	c := sys.client("rr")
	var seq []string
	for i := range 9 {
		ep, err := ask(c, model, fmt.Sprintf("round robin %d", i), 4)
		Expect(err).NotTo(HaveOccurred())
		seq = append(seq, ep)
	}
	logf("round-robin: %v", seq)
	Expect(seq[:3]).To(ConsistOf(allPods))
	for i := 3; i < len(seq); i++ {
		Expect(seq[i]).To(Equal(seq[i-3]), "request %d of %v breaks the cycle", i, seq)
	}
}

// sessionsStick: every request of a session goes to the session's first pod.
func sessionsStick() {
	c := sys.client("sa")
	for _, id := range []string{"alice", "bob", "carol", "dave", "erin"} {
		var seen []string
		for i := range 4 {
			ep, err := ask(c, model, fmt.Sprintf("%s asks question %d", id, i), 4, session(id))
			Expect(err).NotTo(HaveOccurred())
			seen = append(seen, ep)
		}
		logf("session %s: %v", id, seen)
		Expect(seen).To(HaveEach(seen[0]), "session %s moved", id)
		Expect(allPods).To(ContainElement(seen[0]))
	}
}

// leastRequestSpreadsBurst: requests sent at once, each long enough to be in flight while
// the others are routed, are spread evenly because each choice reserves its endpoint.
func leastRequestSpreadsBurst() {
	counts := burst(sys.client("lr"), 9, func(i int) []openai.ChatCompletionMessageParamUnion {
		return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("burst request %d", i))}
	})
	logf("least-request burst of 9: %v", counts)
	Expect(counts).To(HaveLen(3))
	for ep, n := range counts {
		Expect(n).To(BeNumerically("<=", 4), "%s took %d of 9 concurrent requests: %v", ep, n, counts)
	}
}

// liveStrategySwitch: policy "live" starts as round-robin, which ignores sessions; after
// kubectl patches it to session-affinity, new requests of a session stick to one pod.
func liveStrategySwitch() {
	c := sys.client("live")
	sess := session("live-session")
	var before []string
	for i := range 6 {
		ep, err := ask(c, model, fmt.Sprintf("before the switch %d", i), 4, sess)
		Expect(err).NotTo(HaveOccurred())
		before = append(before, ep)
	}
	logf("round-robin with a session header: %v", before)
	Expect(before[:3]).To(ConsistOf(allPods))

	_, err := sys.kubectl("patch", "rp", "live", "-n", ns, "--type=merge", "-p", `{"spec":{"strategy":"session-affinity"}}`)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		var seen []string
		for i := range 4 {
			ep, err := ask(c, model, fmt.Sprintf("after the switch %d", i), 4, sess)
			g.Expect(err).NotTo(HaveOccurred())
			seen = append(seen, ep)
		}
		g.Expect(seen).To(HaveEach(seen[0]))
	}).Should(Succeed())
	first, err := ask(c, model, "settled", 4, sess)
	Expect(err).NotTo(HaveOccurred())
	for i := range 6 {
		ep, err := ask(c, model, fmt.Sprintf("settled %d", i), 4, sess)
		Expect(err).NotTo(HaveOccurred())
		Expect(ep).To(Equal(first), "request %d of the session after the switch", i)
	}
	Eventually(func(g Gomega) {
		out, err := sys.kubectl("get", "rp", "live", "-n", ns)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cell(out, "live", "STRATEGY")).To(Equal("session-affinity"))
		g.Expect(cell(out, "live", "READY")).To(Equal("True"))
	}).Should(Succeed())
}

// conversationsStick: each turn of a conversation extends the previous prompt, so the pod
// that served the conversation holds its prefix and serves the next turn too.
func conversationsStick() {
	c := sys.client("pc")
	for conv := range 4 {
		msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(fmt.Sprintf(
			"Conversation %d. You are a careful assistant for team %d of the Switchboard project. %s",
			conv, conv, strings.Repeat(fmt.Sprintf("Team %d cares about detail. ", conv), 8)))}
		var seen []string
		for turn := range 4 {
			msgs = append(msgs, openai.UserMessage(fmt.Sprintf("Turn %d: tell me more about item %d of our backlog.", turn, turn*7+conv)))
			ep, reply, err := converse(c, model, msgs, 12)
			Expect(err).NotTo(HaveOccurred())
			seen = append(seen, ep)
			msgs = append(msgs, openai.AssistantMessage(reply))
		}
		logf("conversation %d: %v", conv, seen)
		Expect(seen).To(HaveEach(seen[0]), "conversation %d moved between pods", conv)
	}
}

// hotPrefixSpreads: a long system prompt is first served by one pod, which then holds it
// and gets the next request with it; a concurrent burst of requests sharing it, with
// distinct suffixes, still reaches every pod, because the load guard
// (loadImbalanceThreshold 2) leaves out a pod that is too far ahead of the idlest.
func hotPrefixSpreads() {
	hot := strings.Repeat("You are the shared assistant of every tenant of the Switchboard gateway. ", 16)
	c := sys.client("pc")
	msgs := func(i int) []openai.ChatCompletionMessageParamUnion {
		return []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(hot), openai.UserMessage(fmt.Sprintf("Distinct question number %d.", i)),
		}
	}
	holder, _, err := converse(c, model, msgs(-1), 4)
	Expect(err).NotTo(HaveOccurred())
	next, _, err := converse(c, model, msgs(-2), 4)
	Expect(err).NotTo(HaveOccurred())
	Expect(next).To(Equal(holder), "a sequential request with the hot prefix left the pod that holds it")

	counts := burst(c, 24, msgs)
	logf("hot prefix held by %s; burst of 24: %v", holder, counts)
	Expect(counts).To(HaveLen(3))
}

// burstTokens is the output length of a burst's requests: long enough (about 0.3 s at
// the engines' time scale) for all of a burst to be in flight together.
const burstTokens = 400

// burst sends n chat completions at once with the messages of msgs(i) and returns how many
// each endpoint served; every request must succeed.
func burst(c openai.Client, n int, msgs func(i int) []openai.ChatCompletionMessageParamUnion, opts ...option.RequestOption) map[string]int {
	eps, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { eps[i], _, errs[i] = converse(c, model, msgs(i), burstTokens, opts...) })
	}
	wg.Wait()
	counts := map[string]int{}
	for i := range n {
		Expect(errs[i]).NotTo(HaveOccurred(), "request %d of the burst", i)
		counts[eps[i]]++
	}
	return counts
}

// metricStrategiesServe: the strategies that read engine metrics (and random) route a
// concurrent burst to the route's pods, every request served, and spread it over more
// than one pod.
func metricStrategiesServe() {
	for _, route := range []string{"random", "least-kv-cache", "least-latency", "throughput", "weighted"} {
		// Every burst starts from idle engines as the gateway sees them, not from the
		// scraped remains of the previous route's burst.
		quiet := time.Now().Add(2 * scrapeInterval)
		Eventually(func() bool { return sys.enginesIdleSince(model, quiet) }).Should(BeTrue(), "engines idle before route %s", route)
		c := sys.client(route)
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				defer GinkgoRecover()
				ep, err := ask(c, model, fmt.Sprintf("%s request %d with a prompt long enough to fill a block or two", route, i), 16)
				Expect(err).NotTo(HaveOccurred(), "route %s", route)
				mu.Lock()
				seen[ep]++
				mu.Unlock()
			})
		}
		wg.Wait()
		logf("%s: %v", route, seen)
		for ep := range seen {
			Expect(allPods).To(ContainElement(ep), "route %s routed to %s", route, ep)
		}
		Expect(len(seen)).To(BeNumerically(">", 1), "route %s sent a burst of 12 to one pod: %v", route, seen)
	}
}
