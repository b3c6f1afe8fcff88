package enginesim

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config describes one simulated engine. The zero value is not usable; start from
// [DefaultConfig].
type Config struct {
	// Model is the base model name served by the engine.
	Model string
	// APIKey, if set, is required as a bearer token on every API endpoint: all but /health,
	// /metrics and /admin/faults. (vLLM itself guards only /v1 paths.)
	APIKey string
	// BlockSize is the number of tokens per KV-cache block.
	BlockSize int
	// KVBlocks is the number of KV-cache blocks.
	KVBlocks int
	// MaxNumSeqs bounds the number of running requests; the rest wait FIFO.
	MaxNumSeqs int
	// MaxLoRAs bounds the number of loaded LoRA adapters.
	MaxLoRAs int
	// LoRAModules are adapters loaded when the engine starts, as vLLM's --lora-modules
	// loads them: served and listed at once, counted against MaxLoRAs, unloadable like
	// adapters loaded through the admin API.
	LoRAModules []LoRAModule
	// LoRALoadTime is how long loading an adapter takes.
	LoRALoadTime time.Duration
	// PrefillOverhead is the fixed part of the time to first token.
	PrefillOverhead time.Duration
	// PrefillPerToken is the prefill time of one uncached prompt token.
	PrefillPerToken time.Duration
	// PrefillBatchFactor slows prefill by this fraction per other running request.
	PrefillBatchFactor float64
	// InterTokenLatency is the decode time of one output token with a batch of one.
	InterTokenLatency time.Duration
	// DecodeBatchFactor slows decode by this fraction per other running request.
	DecodeBatchFactor float64
	// DefaultMaxTokens is the mean output length when a request sets no max_tokens; actual
	// lengths are drawn uniformly from [1, 2*DefaultMaxTokens-1].
	DefaultMaxTokens int
	// TimeScale multiplies every simulated delay (0.01 makes the engine 100 times faster).
	TimeScale float64
	// Seed makes output lengths and texts deterministic.
	Seed int64
	// Faults are the faults injected from the start; they can be changed at run time.
	Faults Faults
}

// DefaultConfig returns a configuration resembling a small vLLM deployment.
func DefaultConfig() Config {
	return Config{
		Model:              "llama-3-8b",
		BlockSize:          16,
		KVBlocks:           2048,
		MaxNumSeqs:         32,
		MaxLoRAs:           4,
		LoRALoadTime:       200 * time.Millisecond,
		PrefillOverhead:    20 * time.Millisecond,
		PrefillPerToken:    200 * time.Microsecond,
		PrefillBatchFactor: 0.05,
		InterTokenLatency:  15 * time.Millisecond,
		DecodeBatchFactor:  0.03,
		DefaultMaxTokens:   64,
		TimeScale:          1,
		Seed:               1,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Model == "":
		return errors.New("model must not be empty")
	case c.BlockSize <= 0:
		return errors.New("block size must be positive")
	case c.KVBlocks <= 0:
		return errors.New("kv blocks must be positive")
	case c.MaxNumSeqs <= 0:
		return errors.New("max num seqs must be positive")
	case c.MaxLoRAs < 0:
		return errors.New("max loras must not be negative")
	case c.TimeScale < 0:
		return errors.New("time scale must not be negative")
	case c.DefaultMaxTokens <= 0:
		return errors.New("default max tokens must be positive")
	case len(c.LoRAModules) > c.MaxLoRAs:
		return fmt.Errorf("%d lora modules exceed max loras %d", len(c.LoRAModules), c.MaxLoRAs)
	}
	seen := map[string]bool{c.Model: true}
	for _, m := range c.LoRAModules {
		switch {
		case m.Name == "" || m.Path == "":
			return fmt.Errorf("lora module %q: name and path must not be empty", m.Name+"="+m.Path)
		case seen[m.Name]:
			return fmt.Errorf("lora module %q: name already used by the model or another module", m.Name)
		}
		seen[m.Name] = true
	}
	return nil
}

// LoRAModule is a LoRA adapter loaded when the engine starts.
type LoRAModule struct {
	// Name is the model name requests use for the adapter.
	Name string
	// Path is where the adapter would be loaded from; the engine only reports it as the
	// root of the adapter's model card.
	Path string
}

// ParseLoRAModules reads a comma-separated list of name=path adapters, the form of
// engine-sim's --lora-modules flag (vLLM's takes space-separated name=path arguments).
func ParseLoRAModules(s string) ([]LoRAModule, error) {
	var modules []LoRAModule
	for _, item := range strings.Split(s, ",") {
		name, path, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("lora module %q: want name=path", item)
		}
		modules = append(modules, LoRAModule{Name: name, Path: path})
	}
	return modules, nil
}
