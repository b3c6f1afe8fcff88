package bench

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Message is one chat message of a request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one chat completion the load generator sends.
type Request struct {
	Messages  []Message
	MaxTokens int
	// Kind names the request's shape within its workload (KindTurn, KindHot, KindUnique),
	// for the per-request records (Config.Requests).
	Kind string
}

// The kinds of request the workloads send.
const (
	// KindTurn is a conversation's next turn, under one of the shared system prompts.
	KindTurn = "turn"
	// KindHot is a short question under the hot system prompt.
	KindHot = "hot"
	// KindUnique is a prompt that shares nothing with any other.
	KindUnique = "unique"
)

// Workload generates the requests of one load point.
type Workload struct {
	// Name is the short identifier used in the results ("shared-prefix", ...).
	Name string
	// Title is the report's heading for the workload.
	Title string
	// Description says what the requests look like.
	Description string
	// Generate returns n requests drawn with rng. Every prompt starts with salt, so that
	// two load points never share cached prefixes.
	Generate func(rng *rand.Rand, n int, salt string) []Request
	// FailingEngines is how many engines, from engine 0 on, answer every inference request
	// with an error at once during the workload's points (engine-sim /admin/faults,
	// fail_fraction 1). Zero means none.
	FailingEngines int
}

// Workload shapes, in approximate tokens (4 characters each, as the engines count them).
const (
	systemPromptTokens = 1536
	hotPromptTokens    = 2048
	randomPromptMin    = 1000
	randomPromptMax    = 2000
	outputTokens       = 64
	sharedSystems      = 8
	sharedUsers        = 64
	maxTurns           = 8
	hotShare           = 0.75
)

// Workloads returns the workloads of the benchmark.
func Workloads() []Workload {
	return []Workload{
		{
			Name:  "shared-prefix",
			Title: "(a) Shared prefixes, multi-turn",
			Description: fmt.Sprintf("%d users under %d system prompts of ~%d tokens; each request is a user's next turn "+
				"(60-120 new tokens) on top of the conversation so far, earlier replies included, which grows for up to %d turns and then restarts; %d output tokens.",
				sharedUsers, sharedSystems, systemPromptTokens, maxTurns, outputTokens),
			Generate: sharedPrefix,
		},
		{
			Name:  "no-sharing",
			Title: "(b) No sharing",
			Description: fmt.Sprintf("Unique random prompts of %d-%d tokens; %d output tokens.",
				randomPromptMin, randomPromptMax, outputTokens),
			Generate: noSharing,
		},
		{
			Name:  "hot-prefix",
			Title: "(c) Hot prefix",
			Description: fmt.Sprintf("%.0f%% of requests share one ~%d-token system prompt followed by a short unique question; "+
				"the rest are unique random prompts of %d-%d tokens; %d output tokens. Following the prefix blindly "+
				"sends three quarters of the traffic to one engine.",
				hotShare*100, hotPromptTokens, randomPromptMin, randomPromptMax, outputTokens),
			Generate: hotPrefix,
		},
		{
			Name:  "fast-fail",
			Title: "(d) Fast-failing engine",
			Description: fmt.Sprintf("The no-sharing traffic (unique random prompts of %d-%d tokens; %d output tokens) while engine 0 "+
				"answers every request with an HTTP 500 at once (engine-sim `/admin/faults`, `fail_fraction` 1; set after the engines "+
				"restart for each strategy and seed, cleared after its points). failed %% is the share of sent requests the client saw fail; the gateway "+
				"retries a 5xx answer on another endpoint, so this is what clients see (engine 0's own count is in benchmarks.json, `load_spread.per_engine`).",
				randomPromptMin, randomPromptMax, outputTokens),
			Generate:       noSharing,
			FailingEngines: 1,
		},
	}
}

// WorkloadNames returns the names of [Workloads], in order.
func WorkloadNames() []string {
	var names []string
	for _, w := range Workloads() {
		names = append(names, w.Name)
	}
	return names
}

func sharedPrefix(rng *rand.Rand, n int, salt string) []Request {
	systems := make([]string, sharedSystems)
	for i := range systems {
		systems[i] = salt + fmt.Sprintf(" system prompt %d: ", i) + text(rng, systemPromptTokens)
	}
	type conversation struct{ history []Message }
	users := make([]conversation, sharedUsers)
	reqs := make([]Request, 0, n)
	for range n {
		u := rng.IntN(sharedUsers)
		c := &users[u]
		if len(c.history) == 0 || len(c.history) >= 1+2*maxTurns {
			c.history = []Message{{Role: "system", Content: systems[u%sharedSystems]}}
		}
		c.history = append(c.history, Message{Role: "user", Content: fmt.Sprintf("user %d: ", u) + text(rng, 60+rng.IntN(61))})
		reqs = append(reqs, Request{Messages: append([]Message(nil), c.history...), MaxTokens: outputTokens, Kind: KindTurn})
		// The reply becomes part of the history; the load stays open-loop, so it is synthetic.
		c.history = append(c.history, Message{Role: "assistant", Content: text(rng, outputTokens)})
	}
	return reqs
}

func noSharing(rng *rand.Rand, n int, salt string) []Request {
	reqs := make([]Request, 0, n)
	for i := range n {
		reqs = append(reqs, randomRequest(rng, fmt.Sprintf("%s request %d: ", salt, i)))
	}
	return reqs
}

func hotPrefix(rng *rand.Rand, n int, salt string) []Request {
	hot := salt + " hot system prompt: " + text(rng, hotPromptTokens)
	reqs := make([]Request, 0, n)
	for i := range n {
		if rng.Float64() < hotShare {
			reqs = append(reqs, Request{MaxTokens: outputTokens, Kind: KindHot, Messages: []Message{
				{Role: "system", Content: hot},
				{Role: "user", Content: fmt.Sprintf("question %d: ", i) + text(rng, 30+rng.IntN(30))},
			}})
			continue
		}
		reqs = append(reqs, randomRequest(rng, fmt.Sprintf("%s request %d: ", salt, i)))
	}
	return reqs
}

func randomRequest(rng *rand.Rand, head string) Request {
	tokens := randomPromptMin + rng.IntN(randomPromptMax-randomPromptMin+1)
	return Request{MaxTokens: outputTokens, Kind: KindUnique, Messages: []Message{{Role: "user", Content: head + text(rng, tokens)}}}
}

var words = strings.Fields("the a router engine cache prefix token model query table order region week " +
	"customer latency batch queue request stream reply system user prompt block memory load spread " +
	"gateway policy score weight hot cold warm fleet pod service route")

// text returns about tokens tokens (4 characters each) of random words.
func text(rng *rand.Rand, tokens int) string {
	var sb strings.Builder
	target := tokens * 4
	sb.Grow(target + 16)
	for sb.Len() < target {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[rng.IntN(len(words))])
	}
	return sb.String()
}
