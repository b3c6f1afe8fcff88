// Package enginesim simulates a vLLM inference engine closely enough that a router cannot
// tell it apart on the wire, and that routing quality shows up in its latencies.
//
// It owns the OpenAI-compatible HTTP API as vLLM serves it (chat and text completions,
// streaming and not, /v1/models, /health, /metrics), the vLLM LoRA admin API, an engine
// model (a prefix-caching KV cache, a bounded running batch with a FIFO waiting queue and a
// latency model driven by both), Prometheus metrics with vLLM's names, and fault injection.
//
// Tokens are approximated from characters with the same rule as the router: a text of n
// bytes counts as ceil(n/4) tokens (see [CountTokens]); a prompt's prefix-cache blocks are
// the chained xxhash of each full block of BlockSize tokens, i.e. of 4*BlockSize bytes.
//
// It does not own process concerns (flags, signals, listeners): cmd/engine-sim wires those.
// Every [Engine] holds its own state and metrics registry, so one process can host many.
package enginesim
