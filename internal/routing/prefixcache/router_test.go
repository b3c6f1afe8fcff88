package prefixcache_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/ttft"
)

// harness routes requests over a fleet with a prefix-cache router, as the gateway does.
type harness struct {
	fleet  *routingtest.Fleet
	prefix *prefixcache.Router
	router routing.Router
}

func newHarness(pods int, cfg prefixcache.Config, seed uint64) *harness {
	fleet := routingtest.NewFleet("llama", pods)
	cfg.Pods = fleet.Cache
	prefix := prefixcache.New(cfg, routingtest.SeededRandom(seed))
	return &harness{
		fleet:  fleet,
		prefix: prefix,
		router: routing.NewRouter(prefix, routing.Options{Reserver: cache.Tracker{}, StaleAfter: routingtest.StaleAfter}),
	}
}

// route routes one request with prompt and returns its target, whose reservation the
// caller releases.
func (h *harness) route(t testing.TB, prompt string) *routing.Target {
	t.Helper()
	rc := h.fleet.Context(routing.Request{Prompt: prompt, PromptTokens: int64(len(prompt) / 4)})
	h.router.Route(rc)
	target, err := rc.TryResult()
	if err != nil {
		t.Fatalf("route: %v", err)
	}
	return target
}

// podIndex returns the fleet index of p.
func podIndex(t testing.TB, p *cache.Pod) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(p.Key.Name, "p%d", &i); err != nil {
		t.Fatalf("pod %s is not a fleet pod", p.Key)
	}
	return i
}

// inFlightSpread returns the busiest fleet pod's in-flight count minus the idlest one's.
func inFlightSpread(f *routingtest.Fleet) int64 {
	pods := f.Pods()
	lo, hi := pods[0].Load().InFlight(), pods[0].Load().InFlight()
	for _, p := range pods[1:] {
		lo, hi = min(lo, p.Load().InFlight()), max(hi, p.Load().InFlight())
	}
	return hi - lo
}

// Prompts of TestPick use one-token blocks, 4 bytes each.
const (
	promptABCD = "aaaabbbbccccdddd" // 4 blocks
	promptAB   = "aaaabbbb"         // its first 2 blocks
)

func TestPick(t *testing.T) {
	tests := []struct {
		name     string
		cfg      prefixcache.Config
		learnt   map[int]string // pod → prompt routed to it earlier
		learnFor string         // model the prompts were learnt for; the fleet's if empty
		inFlight []int
		prompt   string
		want     int
	}{
		{
			name:     "prompt without a whole block goes to the least loaded",
			learnt:   map[int]string{0: promptABCD},
			inFlight: []int{3, 1, 2, 5},
			prompt:   "aaa",
			want:     1,
		},
		{
			name:     "nothing learnt goes to the least loaded",
			inFlight: []int{3, 2, 0, 5},
			prompt:   promptABCD,
			want:     2,
		},
		{
			name:     "the endpoint holding the prefix wins within the threshold",
			learnt:   map[int]string{2: promptABCD},
			inFlight: []int{0, 0, 4, 0},
			prompt:   promptABCD,
			want:     2,
		},
		{
			name:     "a longer prefix beats a shorter one",
			learnt:   map[int]string{0: promptAB, 1: promptABCD},
			inFlight: []int{0, 1, 0, 0},
			prompt:   promptABCD + "eeee",
			want:     1,
		},
		{
			name:     "among equal matches the least loaded wins",
			learnt:   map[int]string{1: promptABCD, 3: promptABCD},
			inFlight: []int{0, 3, 0, 2},
			prompt:   promptABCD,
			want:     3,
		},
		{
			name:     "a spread short of the threshold keeps the match",
			cfg:      prefixcache.Config{LoadImbalanceThreshold: 8},
			learnt:   map[int]string{2: promptABCD},
			inFlight: []int{0, 1, 7, 1},
			prompt:   promptABCD,
			want:     2,
		},
		{
			name:     "an endpoint the request would put beyond the threshold loses its match",
			cfg:      prefixcache.Config{LoadImbalanceThreshold: 8},
			learnt:   map[int]string{2: promptABCD},
			inFlight: []int{0, 1, 8, 1},
			prompt:   promptABCD,
			want:     0,
		},
		{
			name:     "an endpoint beyond the threshold loses its match to the least loaded",
			cfg:      prefixcache.Config{LoadImbalanceThreshold: 8},
			learnt:   map[int]string{2: promptABCD},
			inFlight: []int{1, 1, 10, 0},
			prompt:   promptABCD,
			want:     3,
		},
		{
			name:     "an overloaded endpoint does not cost other endpoints their matches",
			cfg:      prefixcache.Config{LoadImbalanceThreshold: 8},
			learnt:   map[int]string{1: promptABCD},
			inFlight: []int{20, 2, 0, 1},
			prompt:   promptABCD,
			want:     1,
		},
		{
			name:     "a match below MinMatchRatio goes to the least loaded",
			cfg:      prefixcache.Config{MinMatchRatio: 0.75},
			learnt:   map[int]string{2: promptAB},
			inFlight: []int{2, 1, 0, 2},
			prompt:   promptABCD,
			want:     2,
		},
		{
			name:     "a match at MinMatchRatio counts",
			cfg:      prefixcache.Config{MinMatchRatio: 0.5},
			learnt:   map[int]string{0: promptAB},
			inFlight: []int{2, 1, 0, 2},
			prompt:   promptABCD,
			want:     0,
		},
		{
			name:     "prefixes of another model do not count",
			learnt:   map[int]string{0: promptABCD},
			learnFor: "mistral",
			inFlight: []int{2, 1, 0, 2},
			prompt:   promptABCD,
			want:     2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fleet := routingtest.NewFleet("llama", len(tt.inFlight))
			cfg := tt.cfg
			cfg.BlockSize = 1
			cfg.Pods = fleet.Cache
			r := prefixcache.New(cfg, routingtest.SeededRandom(1))
			for pod, prompt := range tt.learnt {
				rc := fleet.Context(routing.Request{Prompt: prompt})
				if tt.learnFor != "" {
					rc.Request.Model = tt.learnFor
				}
				r.Learn(rc, fleet.Pod(pod))
			}
			for pod, n := range tt.inFlight {
				fleet.Reserve(pod, n)
			}
			rc := fleet.Context(routing.Request{Prompt: tt.prompt})
			got, err := r.Pick(rc, routingtest.Candidates(rc))
			if err != nil || got != tt.want {
				t.Errorf("Pick() = %d, %v; want %d, nil", got, err, tt.want)
			}
			got, n, ok := r.PickPod(rc, routing.Eligibility{StaleAfter: routingtest.StaleAfter})
			if !ok || got != tt.want || n != int64(tt.inFlight[tt.want]) {
				t.Errorf("PickPod() = %d, %d, %t; want %d with its %d in flight", got, n, ok, tt.want, tt.inFlight[tt.want])
			}
		})
	}
}

// TestPickPodIsPick checks PickPod against Pick over random fleets, limits and indexes
// (both draws always take the first tie).
func TestPickPodIsPick(t *testing.T) {
	routingtest.CheckPickPodIsPick(t, func(fleet *routingtest.Fleet, rnd *rand.Rand) routing.PodPicker {
		cfg := prefixcache.Config{BlockSize: 1, LoadImbalanceThreshold: int64(1 + rnd.IntN(4)), Pods: fleet.Cache}
		if rnd.IntN(3) == 0 {
			cfg.MinMatchRatio = 0.5
		}
		r := prefixcache.New(cfg, routingtest.FirstTie)
		learnRandomPrompts(r, fleet, rnd)
		return r
	})
}

// learnRandomPrompts teaches r up to 11 of routingtest.Prompts on random pods of fleet.
func learnRandomPrompts(r *prefixcache.Router, fleet *routingtest.Fleet, rnd *rand.Rand) {
	for range rnd.IntN(12) {
		rc := fleet.Context(routing.Request{Prompt: routingtest.Prompts[rnd.IntN(len(routingtest.Prompts))]})
		r.Learn(rc, fleet.Pod(rnd.IntN(len(fleet.Pods()))))
	}
}

func TestScore(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 3)
	r := prefixcache.New(prefixcache.Config{BlockSize: 1, Pods: fleet.Cache}, routingtest.SeededRandom(1))
	r.Learn(fleet.Context(routing.Request{Prompt: promptABCD}), fleet.Pod(0))
	r.Learn(fleet.Context(routing.Request{Prompt: promptAB}), fleet.Pod(1))

	// No engine speed is learnt: the priors predict the prefill of the tokens each pod
	// lacks (4 of 4 one-token blocks on pod 2, 2 on pod 1, none on pod 0). The longest
	// match is pod 0's alone, so blocks A and B, which pods 0 and 1 hold, earn pod 2 no
	// replication credit.
	prefill := func(uncached float64) float64 { return -uncached * ttft.PriorPrefillPerToken }
	rc := fleet.Context(routing.Request{Prompt: promptABCD})
	scores := make([]float64, 3)
	if err := r.Score(rc, routingtest.Candidates(rc), scores); err != nil {
		t.Fatalf("Score() error = %v", err)
	}
	if want := []float64{prefill(0), prefill(2), prefill(4)}; fmt.Sprint(scores) != fmt.Sprint(want) {
		t.Errorf("scores = %v, want %v", scores, want)
	}

	// Pod 0 runs more than the default threshold ahead of the idlest: the load guard
	// leaves it out (-Inf) despite its full match.
	fleet.Reserve(0, prefixcache.DefaultLoadImbalanceThreshold+1)
	busy := fleet.Context(routing.Request{Prompt: promptABCD})
	if err := r.Score(busy, routingtest.Candidates(busy), scores); err != nil {
		t.Fatalf("Score() error = %v", err)
	}
	if want := []float64{math.Inf(-1), prefill(2), prefill(4)}; fmt.Sprint(scores) != fmt.Sprint(want) {
		t.Errorf("scores with pod 0 overloaded = %v, want %v", scores, want)
	}
}

// TestPickProperties checks, over random learnt state and loads, that Pick returns a
// candidate index, never one the request puts more than the threshold ahead of the idlest,
// and one of the least loaded for prompts without a whole block.
func TestPickProperties(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 7))
	const threshold = 3
	for iter := range 200 {
		pods := 1 + rnd.IntN(6)
		fleet := routingtest.NewFleet("llama", pods)
		r := prefixcache.New(prefixcache.Config{BlockSize: 1, LoadImbalanceThreshold: threshold, Pods: fleet.Cache},
			routingtest.SeededRandom(uint64(iter)))
		prompt := strings.Repeat("x", rnd.IntN(40))
		for range rnd.IntN(10) {
			r.Learn(fleet.Context(routing.Request{Prompt: prompt[:rnd.IntN(len(prompt)+1)]}), fleet.Pod(rnd.IntN(pods)))
		}
		for i := range pods {
			fleet.Reserve(i, rnd.IntN(8))
		}
		rc := fleet.Context(routing.Request{Prompt: prompt})
		cands := routingtest.Candidates(rc)
		got, err := r.Pick(rc, cands)
		if err != nil || got < 0 || got >= len(cands) {
			t.Fatalf("iteration %d: Pick() = %d, %v with %d candidates", iter, got, err, len(cands))
		}
		for _, c := range cands {
			if cands[got].InFlight >= c.InFlight+threshold || (len(prompt) < 4 && cands[got].InFlight > c.InFlight) {
				t.Fatalf("iteration %d: Pick chose %d in flight over %d (prompt of %d bytes)", iter, cands[got].InFlight, c.InFlight, len(prompt))
			}
		}
	}
}

// conversation is a chat whose flattened prompt grows by one exchange per turn, the way
// openai.ParseRequest flattens messages.
type conversation struct {
	prompt strings.Builder
	id     int
}

func (c *conversation) nextTurn(turn int) string {
	if turn == 0 {
		fmt.Fprintf(&c.prompt, "system: You are assistant %d. Answer questions about topic %d with care.\n", c.id, c.id)
	}
	fmt.Fprintf(&c.prompt, "user: Question %d of conversation %d: %s\n", turn, c.id, strings.Repeat("why? ", 20))
	prompt := c.prompt.String()
	fmt.Fprintf(&c.prompt, "assistant: Answer %d: %s\n", turn, strings.Repeat("because. ", 20))
	return prompt
}

// runConversations routes turns turns of each conversation, round by round, releasing
// each reservation right after routing. It returns the pod of every turn.
func runConversations(t *testing.T, h *harness, convs []*conversation, fromTurn, toTurn int, onRound func(turn int)) [][]int {
	t.Helper()
	pods := make([][]int, len(convs))
	for turn := fromTurn; turn < toTurn; turn++ {
		if onRound != nil {
			onRound(turn)
		}
		for c, conv := range convs {
			target := h.route(t, conv.nextTurn(turn))
			pods[c] = append(pods[c], podIndex(t, target.Pod))
			target.Release(1)
		}
	}
	return pods
}

func newConversations(n int) []*conversation {
	convs := make([]*conversation, n)
	for i := range convs {
		convs[i] = &conversation{id: i}
	}
	return convs
}

func TestMultiTurnConversationsStickAndBalance(t *testing.T) {
	const convCount, turns, podCount = 20, 5, 8
	for seed := range uint64(20) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h := newHarness(podCount, prefixcache.Config{}, seed)
			pods := runConversations(t, h, newConversations(convCount), 0, turns, nil)

			sticky, later := 0, 0
			perPod := make([]int, podCount)
			for _, convPods := range pods {
				perPod[convPods[0]]++
				for _, p := range convPods[1:] {
					later++
					if p == convPods[0] {
						sticky++
					}
				}
			}
			if float64(sticky) < 0.9*float64(later) {
				t.Errorf("%d of %d later turns stayed on their conversation's first pod, want >= 90%%", sticky, later)
			}
			fairShare := float64(convCount) / podCount
			for pod, n := range perPod {
				if float64(n) > 2*fairShare {
					t.Errorf("pod %d got %d conversations, more than twice the fair share %.1f", pod, n, fairShare)
				}
			}
		})
	}
}

func TestConversationsAvoidAnOverloadedEndpoint(t *testing.T) {
	const convCount, podCount, overloaded = 20, 8, 0
	h := newHarness(podCount, prefixcache.Config{LoadImbalanceThreshold: 8}, 3)
	convs := newConversations(convCount)
	first := runConversations(t, h, convs, 0, 2, nil)
	onOverloaded := 0
	for _, convPods := range first {
		if convPods[0] == overloaded {
			onOverloaded++
		}
	}
	if onOverloaded == 0 {
		t.Fatalf("no conversation started on pod %d; pick another seed", overloaded)
	}

	h.fleet.Reserve(overloaded, 20)
	later := runConversations(t, h, convs, 2, 5, nil)
	for c, convPods := range later {
		for turn, p := range convPods {
			if p == overloaded {
				t.Errorf("conversation %d turn %d went to the overloaded pod %d", c, turn+2, overloaded)
			}
		}
	}
}

func TestHotSharedPrefixDoesNotPinTraffic(t *testing.T) {
	const podCount, requests, threshold = 8, 1000, 8
	h := newHarness(podCount, prefixcache.Config{LoadImbalanceThreshold: threshold}, 5)
	system := "system: " + strings.Repeat("You are a meticulous assistant. ", 64) + "\n" // 2 KB, 32 blocks
	perPod := make([]int, podCount)
	// Reservations are held: every request is still in flight when the next is routed.
	targets := make([]*routing.Target, 0, requests)
	defer func() {
		for _, target := range targets {
			target.Release(0)
		}
	}()
	for i := range requests {
		target := h.route(t, fmt.Sprintf("%suser: request %d %s\n", system, i, strings.Repeat("?", 100)))
		targets = append(targets, target)
		perPod[podIndex(t, target.Pod)]++
		if s := inFlightSpread(h.fleet); s > threshold {
			t.Fatalf("after %d requests the in-flight spread is %d, beyond the threshold %d (per pod: %v)", i+1, s, threshold, perPod)
		}
	}
	for pod, n := range perPod {
		if n == 0 {
			t.Errorf("pod %d got no request (per pod: %v)", pod, perPod)
		}
	}
}

// TestPopularPrefixSpreadsByLoad checks the replication credit: a prefix that several
// endpoints hold costs an endpoint without it only part of its prefill, so that a request
// takes that endpoint's free slot rather than queue on a holder; a prefix that one
// endpoint holds, alone or as a conversation's history after a system prompt others hold
// too, costs the whole prefill elsewhere, and the request queues on its holder.
func TestPopularPrefixSpreadsByLoad(t *testing.T) {
	// A slot frees after 0.35 s on a full engine: less than a 2048-token prefill (0.41 s),
	// more than a third of it.
	const prefillPerToken, service = 0.0002, 0.35
	system := "system: " + strings.Repeat("abcdefgh", 1024) + "\n"        // 2048 tokens
	history := system + "user: " + strings.Repeat("hgfedcba", 256) + "\n" // 512 tokens more
	tests := []struct {
		name   string
		learnt map[int]string // pod → prompt routed to it earlier; those pods are full
		prompt string
		want   int
	}{
		{"a system prompt three hold: the idle endpoint without it wins",
			map[int]string{0: system, 1: system, 2: system}, system + "user: a question", 3},
		{"a system prompt one holds: the request queues on its holder",
			map[int]string{0: system}, system + "user: a question", 0},
		{"a history one holds: the request queues on its holder, whoever holds the system prompt",
			map[int]string{0: history, 1: system, 2: system}, history + "user: the next turn", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fleet := routingtest.NewFleet("llama", 4)
			r := prefixcache.New(prefixcache.Config{Pods: fleet.Cache}, routingtest.SeededRandom(1))
			// Every engine has 8 slots; those that hold something run a full batch, which
			// started just now (a slot frees after a whole service time), the other half
			// of one.
			for i := range 4 {
				n := 4
				if prompt, ok := tt.learnt[i]; ok {
					r.Learn(fleet.Context(routing.Request{Prompt: prompt}), fleet.Pod(i))
					n = 8
				}
				fleet.Reserve(i, n)
				fleet.SetMetrics(i, endpoint.Metrics{Running: float64(n), LocalInFlight: int64(n), Profile: endpoint.Profile{
					PrefillPerToken: prefillPerToken, Service: service, DecodePerToken: 0.02, Slots: 8,
					PrefilledTokens: 1e6, Requests: 1e3}})
			}
			rc := fleet.Context(routing.Request{Prompt: tt.prompt})
			got, err := r.Pick(rc, routingtest.Candidates(rc))
			if err != nil {
				t.Fatalf("Pick() error = %v", err)
			}
			if got != tt.want {
				t.Errorf("Pick() = pod %d, want pod %d", got, tt.want)
			}
			if got, _, _ := r.PickPod(rc, routing.Eligibility{StaleAfter: routingtest.StaleAfter}); got != tt.want {
				t.Errorf("PickPod() = pod %d, want pod %d", got, tt.want)
			}
		})
	}
}

func TestForgetEndpointsThatLeft(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 4)
	r := prefixcache.New(prefixcache.Config{BlockSize: 1, Pods: fleet.Cache}, routingtest.SeededRandom(1))
	learnt := fleet.Context(routing.Request{Prompt: promptABCD})
	start := learnt.Now
	removed, unready, forgotten, staying := fleet.Pod(1), fleet.Pod(2), fleet.Pod(3), fleet.Pod(0)
	for _, p := range []*cache.Pod{staying, removed, unready, forgotten} {
		r.Learn(learnt, p)
	}
	fleet.Cache.DeletePod(removed.Key)
	notReady := unready.Endpoint
	notReady.Ready = false
	fleet.Cache.UpsertPod(notReady)
	r.Forget(forgotten.Key)

	// matched tells which pods, the ones that left too, hold the whole prompt, as a router holding an old snapshot would.
	matched := func(now time.Time) []bool {
		t.Helper()
		rc := fleet.Context(routing.Request{Prompt: promptABCD})
		rc.Now = now
		if _, err := r.Pick(rc, routingtest.Candidates(rc)); err != nil {
			t.Fatal(err)
		}
		cands := []routing.Candidate{{Pod: staying}, {Pod: removed}, {Pod: unready}, {Pod: forgotten}}
		scores := make([]float64, len(cands))
		if err := r.Score(rc, cands, scores); err != nil {
			t.Fatal(err)
		}
		held := make([]bool, len(scores))
		for i, s := range scores {
			held[i] = s == 0 // nothing left to prefill
		}
		return held
	}
	if got, want := fmt.Sprint(matched(start.Add(time.Second-1))), fmt.Sprint([]bool{true, true, true, false}); got != want {
		t.Errorf("within a second of the last sweep: held = %s, want %s (only Forget applied)", got, want)
	}
	if got, want := fmt.Sprint(matched(start.Add(time.Second))), fmt.Sprint([]bool{true, false, false, false}); got != want {
		t.Errorf("after the next sweep: held = %s, want %s", got, want)
	}
}

func TestRouteThroughRouter(t *testing.T) {
	h := newHarness(16, prefixcache.Config{}, 9)
	prompt := strings.Repeat("A long document to summarise. ", 20)
	first := h.route(t, prompt)
	first.Release(1)
	second := h.route(t, prompt+"And one more question.")
	defer second.Release(1)
	if second.Pod.Key != first.Pod.Key {
		t.Errorf("a prompt extending the previous one went to %s, want %s", second.Pod.Key, first.Pod.Key)
	}
}

// TestConcurrentRouting routes from many goroutines while pods leave; run with -race.
func TestConcurrentRouting(t *testing.T) {
	h := newHarness(8, prefixcache.Config{BlockSize: 1}, 11)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				target := h.route(t, fmt.Sprintf("conversation %d turn %d", g, i%5))
				target.Release(1)
				if g == 0 && i == 50 {
					h.fleet.Cache.DeletePod(routingtest.Key(7))
					h.prefix.Forget(routingtest.Key(6))
				}
			}
		})
	}
	wg.Wait()
	if _, ok := h.fleet.Cache.Pod(endpoint.Key{Namespace: "ns", Name: "p0007"}); ok {
		t.Fatal("pod 7 was not deleted")
	}
}

func TestLearnObservesMatchRatio(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 2)
	var observed []float64
	r := prefixcache.New(prefixcache.Config{BlockSize: 1, ObserveMatch: func(ratio float64) {
		observed = append(observed, ratio)
	}}, routingtest.SeededRandom(1))
	r.Learn(fleet.Context(routing.Request{Prompt: promptAB}), fleet.Pod(0))
	r.Learn(fleet.Context(routing.Request{Prompt: promptABCD}), fleet.Pod(0))
	r.Learn(fleet.Context(routing.Request{Prompt: promptABCD}), fleet.Pod(1))
	r.Learn(fleet.Context(routing.Request{Prompt: "aaa"}), fleet.Pod(1)) // no whole block
	if want := []float64{0, 0.5, 0}; fmt.Sprint(observed) != fmt.Sprint(want) {
		t.Errorf("observed match ratios %v, want %v", observed, want)
	}
}

// held returns how many of prompt's one-token blocks r expects pod to hold.
func held(r *prefixcache.Router, fleet *routingtest.Fleet, pod int, prompt string) int {
	rc := fleet.Context(routing.Request{Prompt: prompt})
	cands := []routing.Candidate{{Pod: fleet.Pod(pod)}}
	scores := make([]float64, 1)
	_ = r.Score(rc, cands, scores)
	return len(prompt)/4 - int(math.Round(-scores[0]/ttft.PriorPrefillPerToken))
}

// TestEngineReportTrimsTheIndex: when the engine reports fewer cached tokens than the
// index expected, the index forgets everything routed to it before the first block the
// engine lacked; when it reports them all, nothing. It holds whether a repeated Learn of
// a prompt moves the prompt's ticks on (retouch interval 0) or leaves them (an hour).
//
// Each request is learnt in a context of its own, or all in one context's memory, as a
// caller that routes one request after another initialises it again (Init): the
// receipt kept there for the next request is then the same memory.
func TestEngineReportTrimsTheIndex(t *testing.T) {
	for _, every := range []time.Duration{0, time.Hour} {
		for _, reuse := range []bool{false, true} {
			t.Run(fmt.Sprintf("retouch every %s/one context %t", every, reuse), func(t *testing.T) {
				checkEngineReportTrimsTheIndex(t, every, reuse)
			})
		}
	}
}

func checkEngineReportTrimsTheIndex(t *testing.T, every time.Duration, reuse bool) {
	fleet := routingtest.NewFleet("llama", 1)
	r := prefixcache.New(prefixcache.Config{BlockSize: 1, Pods: fleet.Cache}, routingtest.SeededRandom(1))
	r.SetRetouchEvery(every)
	older, prompt := "xxxxyyyyzzzzwwww", promptABCD
	var rc routing.RoutingContext
	pod := fleet.Pod(0)
	learn := func(p string) routing.Receipt {
		if !reuse {
			return r.Learn(fleet.Context(routing.Request{Prompt: p}), pod)
		}
		fleet.InitContext(&rc, routing.Request{Prompt: p})
		return r.Learn(&rc, pod)
	}

	if rec := learn(older); rec != nil {
		t.Errorf("Learn of a prompt nothing of which was expected returned a receipt")
	}
	learn(prompt)
	rec := learn(prompt) // expected held: 4 blocks
	if rec == nil {
		t.Fatal("Learn of a prompt expected held returned no receipt")
	}
	rec.Settle(routing.Usage{PromptTokens: 16, CachedTokens: 16})
	if got := held(r, fleet, 0, older); got != 4 {
		t.Errorf("after a full hit, the older prompt is held for %d blocks, want 4", got)
	}
	rec = learn(prompt)
	rec.Settle(routing.Usage{PromptTokens: 16, CachedTokens: 0})
	if got := held(r, fleet, 0, older); got != 0 {
		t.Errorf("after a miss, the older prompt is held for %d blocks, want 0: the engine evicted it first", got)
	}
	if got := held(r, fleet, 0, prompt); got != 4 {
		t.Errorf("the prompt the engine just prefilled is held for %d blocks, want 4", got)
	}
	if reuse {
		// Learning again what is held, in the same memory, reuses the kept receipt.
		if allocs := testing.AllocsPerRun(100, func() { learn(prompt) }); allocs != 0 {
			t.Errorf("Learn of a held prompt in one context's memory allocated %v times per call, want 0", allocs)
		}
	}
}

// TestIndexFollowsTheEngine: the index holds no more than the engine's KV cache
// (cache_config_info) and forgets an endpoint whose engine restarted.
func TestIndexFollowsTheEngine(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	r := prefixcache.New(prefixcache.Config{BlockSize: 1, Pods: fleet.Cache}, routingtest.SeededRandom(1))
	fleet.SetMetrics(0, endpoint.Metrics{NumGPUBlocks: 2, BlockSize: 3}) // 6 one-token blocks
	r.Learn(fleet.Context(routing.Request{Prompt: promptABCD}), fleet.Pod(0))
	r.Learn(fleet.Context(routing.Request{Prompt: "eeeeffffgggghhhh"}), fleet.Pod(0))
	if got := held(r, fleet, 0, promptABCD); got != 2 {
		t.Errorf("older prompt held for %d blocks, want 2: 6 blocks fit, the newer prompt took 4", got)
	}
	fleet.SetMetrics(0, endpoint.Metrics{NumGPUBlocks: 2, BlockSize: 3, Profile: endpoint.Profile{Epoch: 1}})
	if got := held(r, fleet, 0, "eeeeffffgggghhhh"); got != 0 {
		t.Errorf("after a restart the newer prompt is held for %d blocks, want 0", got)
	}
}

// losingReserver loses the race for the first losses reservations, as when concurrent
// decisions took the chosen endpoint meanwhile, then reserves.
type losingReserver struct {
	cache.Tracker
	losses int
}

func (l *losingReserver) TryReserveInto(r *cache.Reservation, m *cache.Model, p *cache.Pod, limit, tokensIn int64) bool {
	if l.losses > 0 {
		l.losses--
		return false
	}
	return l.Tracker.TryReserveInto(r, m, p, limit, tokensIn)
}

// TestPromptHashedOncePerRequest routes requests whose first reservations lose their race,
// so that the decision is taken again, through Pick (PickPod) and through Score: each
// request's prompt is hashed once, for every attempt and the learning after them.
func TestPromptHashedOncePerRequest(t *testing.T) {
	const requests, losses = 4, 5
	for _, path := range []string{"pick", "score"} {
		t.Run(path, func(t *testing.T) {
			prompts, _ := prefixcache.CountHashing(t)
			fleet := routingtest.NewFleet("llama", 4)
			var picker routing.Picker = prefixcache.New(prefixcache.Config{Pods: fleet.Cache}, routingtest.SeededRandom(1))
			if path == "score" {
				picker = routing.Highest(picker.(routing.Scorer), routingtest.SeededRandom(1))
			}
			reserver := &losingReserver{}
			router := routing.NewRouter(picker, routing.Options{Reserver: reserver, StaleAfter: routingtest.StaleAfter})
			for i := range requests {
				reserver.losses = losses
				routingtest.Route(t, router, fleet.Context(routing.Request{Prompt: benchPrompt(i, 4<<10)})).Release(0)
				if reserver.losses != 0 {
					t.Fatalf("request %d: %d reservations left to lose, want every one lost", i, reserver.losses)
				}
			}
			if got := prompts.Load(); got != requests {
				t.Errorf("%d requests, each decided %d times, hashed %d prompts, want %d", requests, losses+1, got, requests)
			}
		})
	}
}

// TestPromptHashedUpToTheBound hashes only the leading blocks an endpoint can hold of a
// prompt longer than MaxBlocksPerEndpoint, and still matches them.
func TestPromptHashedUpToTheBound(t *testing.T) {
	_, hashed := prefixcache.CountHashing(t)
	var matched []float64
	h := newHarness(2, prefixcache.Config{BlockSize: 1, MaxBlocksPerEndpoint: 4,
		ObserveMatch: func(r float64) { matched = append(matched, r) }}, 1)
	prompt := strings.Repeat("abcd", 100)
	first := h.route(t, prompt)
	first.Release(0)
	if got := h.route(t, prompt); got.Pod != first.Pod {
		t.Errorf("the prompt went to %s, then to %s, want the endpoint holding its first 4 blocks", first.Pod.Key, got.Pod.Key)
	}
	if got, want := hashed.Load(), int64(2*4*4); got != want {
		t.Errorf("hashed %d bytes of two 400-byte prompts, want the %d of their first 4 blocks", got, want)
	}
	if want := []float64{0, 4.0 / 100}; !slices.Equal(matched, want) {
		t.Errorf("match ratios %v, want %v (of all the prompt's blocks)", matched, want)
	}
}

// TestScoreCellsIsScore checks ScoreCells against Score over random fleets whose pods
// the index holds random prompts for.
func TestScoreCellsIsScore(t *testing.T) {
	for _, ratio := range []float64{0, 0.5} {
		r := prefixcache.New(prefixcache.Config{BlockSize: 1, LoadImbalanceThreshold: 2, MinMatchRatio: ratio}, routingtest.SeededRandom(1))
		routingtest.CheckScoreCellsIsScore(t, r, func(fleet *routingtest.Fleet, rnd *rand.Rand) {
			learnRandomPrompts(r, fleet, rnd)
		})
	}
}

// TestReceiptsOfTwoRoutersInOneContext: two routers learning one request in one
// context's memory, as the terms of a weighted policy may, each return a receipt of
// their own: a miss settled on the first trims the first router's index alone.
func TestReceiptsOfTwoRoutersInOneContext(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	pod := fleet.Pod(0)
	a := prefixcache.New(prefixcache.Config{BlockSize: 1, Pods: fleet.Cache}, routingtest.SeededRandom(1))
	b := prefixcache.New(prefixcache.Config{BlockSize: 1, Pods: fleet.Cache}, routingtest.SeededRandom(1))
	older := "xxxxyyyyzzzzwwww"
	var rc routing.RoutingContext
	for _, p := range []string{older, promptABCD} {
		for _, r := range []*prefixcache.Router{a, b} {
			fleet.InitContext(&rc, routing.Request{Prompt: p})
			r.Learn(&rc, pod)
		}
	}
	fleet.InitContext(&rc, routing.Request{Prompt: promptABCD})
	recA, recB := a.Learn(&rc, pod), b.Learn(&rc, pod)
	if recA == nil || recB == nil || recA == recB {
		t.Fatalf("receipts %p and %p, want one of each router's", recA, recB)
	}
	recA.Settle(routing.Usage{PromptTokens: 16, CachedTokens: 0})
	if got := held(a, fleet, 0, older); got != 0 {
		t.Errorf("after a miss settled on the first router, it holds the older prompt for %d blocks, want 0", got)
	}
	if got := held(b, fleet, 0, older); got != 4 {
		t.Errorf("after a miss settled on the first router, the second holds the older prompt for %d blocks, want 4", got)
	}
}
