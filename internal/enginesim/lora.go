package enginesim

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// loraError is a failed adapter operation with the HTTP status vLLM would answer.
type loraError struct {
	status  int
	errType string
	message string
}

func (e *loraError) Error() string { return e.message }

// LoadAdapter loads a LoRA adapter, taking the configured load time. It fails if the name is
// taken, already loading, or the engine holds --max-loras adapters.
func (e *Engine) LoadAdapter(ctx context.Context, name, path string) error {
	if name == "" || path == "" {
		return &loraError{400, "BadRequestError", "Both 'lora_name' and 'lora_path' must be provided."}
	}
	e.mu.Lock()
	if _, ok := e.adapters[name]; ok || e.loading[name] || name == e.cfg.Model {
		e.mu.Unlock()
		return &loraError{400, "InvalidUserInput", fmt.Sprintf("The lora adapter '%s' has already been loaded.", name)}
	}
	if len(e.adapters)+len(e.loading) >= e.cfg.MaxLoRAs {
		e.mu.Unlock()
		return &loraError{400, "BadRequestError", fmt.Sprintf("Cannot load lora adapter '%s': max_loras=%d adapters are already loaded.", name, e.cfg.MaxLoRAs)}
	}
	e.loading[name] = true
	e.mu.Unlock()

	err := e.sleep(ctx, e.cfg.LoRALoadTime)
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.loading, name)
	if err != nil {
		return err
	}
	e.adapters[name] = path
	return nil
}

// UnloadAdapter unloads a loaded LoRA adapter.
func (e *Engine) UnloadAdapter(name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.adapters[name]; !ok {
		return &loraError{404, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", name)}
	}
	delete(e.adapters, name)
	return nil
}

// Adapters returns the names of the loaded adapters, sorted.
func (e *Engine) Adapters() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.adapters))
}

// servesModel reports whether name is the base model or a loaded adapter.
func (e *Engine) servesModel(name string) bool {
	if name == e.cfg.Model {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.adapters[name]
	return ok
}
