// Package engineclient talks to the admin API of a vLLM-compatible engine (DESIGN §3): it
// lists the served models (GET /v1/models) and loads and unloads LoRA adapters
// (POST /v1/load_lora_adapter, POST /v1/unload_lora_adapter).
//
// The package owns only the HTTP exchange and the classification of engine answers into
// errors callers can branch on (ErrMaxAdapters, ErrAlreadyLoaded, ErrNotLoaded,
// ErrUnauthorized). It does not decide where adapters go, read Kubernetes objects or retry;
// the ModelAdapter controller does that.
package engineclient
