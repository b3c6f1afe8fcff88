package enginesim

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Engine is one simulated vLLM engine: its scheduler, KV cache, adapters, faults and
// metrics. All methods are safe for concurrent use; mu guards every mutable field except
// faults, which has its own lock.
type Engine struct {
	cfg     Config
	metrics *engineMetrics
	faults  *faultState
	ids     atomic.Int64

	mu       sync.Mutex
	rng      *rand.Rand
	kv       *kvCache
	running  []*sequence
	waiting  []*sequence
	adapters map[string]string // loaded adapter name -> path
	loading  map[string]bool   // adapters being loaded
}

// sequence is one request inside the scheduler. admitted is closed by the engine once the
// request runs; the fields below it are written before the close and read after it.
type sequence struct {
	adapter   string
	hashes    []uint64
	blocks    int
	queued    time.Time // when the request joined the waiting queue
	admitted  chan struct{}
	alloc     kvAllocation
	cachedTok int
	batch     int
	scheduled time.Time // when the request left the waiting queue to run
}

// NewEngine returns an engine for a validated configuration.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		metrics:  newEngineMetrics(cfg),
		faults:   newFaultState(cfg.Faults),
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed)),
		kv:       newKVCache(cfg.KVBlocks),
		adapters: map[string]string{},
		loading:  map[string]bool{},
	}
	for _, m := range cfg.LoRAModules {
		e.adapters[m.Name] = m.Path
	}
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Scaled returns the modelled duration d at the configured time scale: what the engine
// waits for it, without faults.
func (c *Config) Scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.TimeScale)
}

// delay returns d scaled by the time scale and the current slow-down fault.
func (e *Engine) delay(d time.Duration) time.Duration {
	return time.Duration(float64(e.cfg.Scaled(d)) * e.faults.get().slowFactor())
}

// sleep waits for the scaled duration d or until ctx ends.
func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	d = e.delay(d)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// outputLength picks the number of tokens to generate: maxTokens when set, otherwise a
// seeded draw around the configured mean.
func (e *Engine) outputLength(maxTokens int) int {
	if maxTokens > 0 {
		return maxTokens
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return 1 + e.rng.IntN(2*e.cfg.DefaultMaxTokens-1)
}

// word returns a deterministic pseudo-word for generated text.
func (e *Engine) word() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return vocabulary[e.rng.IntN(len(vocabulary))]
}

var vocabulary = []string{" the", " model", " routes", " a", " token", " cache", " prefix", " engine", " fast", " and", "."}

// admit queues a request and blocks until it runs or ctx ends. The caller must call finish
// with the returned sequence once admitted.
func (e *Engine) admit(ctx context.Context, prompt string, outputTokens int, adapter string) (*sequence, error) {
	promptTokens := CountTokens(prompt)
	hashes := BlockHashes(prompt, e.cfg.BlockSize)
	total := min((promptTokens+outputTokens+e.cfg.BlockSize-1)/e.cfg.BlockSize, e.cfg.KVBlocks)
	seq := &sequence{
		adapter:  adapter,
		hashes:   hashes[:min(len(hashes), total)],
		blocks:   total,
		queued:   time.Now(),
		admitted: make(chan struct{}),
	}
	e.mu.Lock()
	e.waiting = append(e.waiting, seq)
	e.schedule()
	e.mu.Unlock()
	select {
	case <-seq.admitted:
		return seq, nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-seq.admitted:
		e.releaseLocked(seq)
	default:
		e.waiting = slices.DeleteFunc(e.waiting, func(s *sequence) bool { return s == seq })
		e.schedule()
	}
	return nil, ctx.Err()
}

// finish releases a running sequence's slot and blocks.
func (e *Engine) finish(seq *sequence) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releaseLocked(seq)
}

func (e *Engine) releaseLocked(seq *sequence) {
	e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s == seq })
	e.kv.release(seq.alloc)
	e.schedule()
}

// schedule admits waiting requests in FIFO order while there is a free slot and room in the
// KV cache, then refreshes the scheduler gauges. e.mu must be held.
func (e *Engine) schedule() {
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		seq := e.waiting[0]
		alloc, hit, ok := e.kv.allocate(seq.hashes, seq.blocks-len(seq.hashes))
		if !ok {
			break
		}
		e.waiting = e.waiting[1:]
		seq.alloc = alloc
		seq.cachedTok = hit * e.cfg.BlockSize
		e.running = append(e.running, seq)
		seq.batch = len(e.running)
		seq.scheduled = time.Now()
		close(seq.admitted)
	}
	e.metrics.running.Set(float64(len(e.running)))
	e.metrics.waiting.Set(float64(len(e.waiting)))
	e.metrics.kvUsage.Set(e.kv.usage())
	e.metrics.setLoRAInfo(adapterNames(e.running), adapterNames(e.waiting), float64(time.Now().Unix()))
	e.metrics.changed()
}

// batchSize is the current number of running requests.
func (e *Engine) batchSize() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.running)
}

func adapterNames(seqs []*sequence) []string {
	var names []string
	for _, s := range seqs {
		if s.adapter != "" && !slices.Contains(names, s.adapter) {
			names = append(names, s.adapter)
		}
	}
	slices.Sort(names)
	return names
}
