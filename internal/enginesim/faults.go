package enginesim

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Faults are injected failures. The zero value injects none.
type Faults struct {
	// FailFraction is the fraction of inference requests (completions, responses,
	// embeddings, scores, audio; not tokenizer calls) answered with a 500, in [0,1].
	FailFraction float64 `json:"fail_fraction"`
	// DropMidStream closes the connection of generating requests (completions, responses,
	// audio) after the first streamed chunk, or before any byte of a non-streaming answer.
	DropMidStream bool `json:"drop_mid_stream"`
	// MetricsHang makes /metrics block until the client gives up.
	MetricsHang bool `json:"metrics_hang"`
	// UnreadySeconds makes /health answer 503 for this many seconds from when it is set.
	UnreadySeconds float64 `json:"unready_seconds"`
	// SlowFactor multiplies every delay when greater than 1.
	SlowFactor float64 `json:"slow_factor"`
}

func (f Faults) slowFactor() float64 {
	return max(f.SlowFactor, 1)
}

// faultState holds the current faults; readers get a copy.
type faultState struct {
	mu           sync.Mutex
	faults       Faults
	unreadyUntil time.Time
	rng          *rand.Rand
}

func newFaultState(f Faults) *faultState {
	s := &faultState{rng: rand.New(rand.NewPCG(1, 2))}
	s.set(f)
	return s
}

func (s *faultState) set(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	s.unreadyUntil = time.Now().Add(time.Duration(f.UnreadySeconds * float64(time.Second)))
}

func (s *faultState) get() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// ready reports whether the start-up unreadiness has elapsed.
func (s *faultState) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !time.Now().Before(s.unreadyUntil)
}

// shouldFail draws whether this request fails.
func (s *faultState) shouldFail() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults.FailFraction > 0 && s.rng.Float64() < s.faults.FailFraction
}

// SetFaults replaces the engine's injected faults; UnreadySeconds counts from now.
func (e *Engine) SetFaults(f Faults) { e.faults.set(f) }
