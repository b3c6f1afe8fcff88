// Package enginesim simulates a vLLM inference engine closely enough that a router cannot
// tell it apart on the wire, and that routing quality shows up in its latencies.
//
// It owns the OpenAI-compatible HTTP API as vLLM serves it (chat and text completions and
// responses, streaming and not, embeddings, audio transcriptions and translations,
// /v1/models, /health, /metrics), vLLM's rerank, score, tokenize and detokenize endpoints,
// the vLLM LoRA admin API and adapters loaded at start-up, an engine model (a
// prefix-caching KV cache, a bounded running batch with a FIFO waiting queue and a latency
// model driven by both), Prometheus metrics with vLLM's names, and fault injection.
//
// Tokens are approximated from characters with the same rule as the router: a text of n
// bytes counts as ceil(n/4) tokens (see [CountTokens]); a prompt's prefix-cache blocks are
// the chained xxhash of each full block of BlockSize tokens, i.e. of 4*BlockSize bytes. A
// token id stands for its 4 big-endian bytes. Prompt-only requests (embeddings, scores) are
// scheduled and prefilled like generations and count as requests in the metrics; their
// outputs (pseudo-embeddings, word-overlap scores, transcripts) are deterministic.
//
// It does not own process concerns (flags, signals, listeners): cmd/engine-sim wires those.
// Every [Engine] holds its own state and metrics registry, so one process can host many.
package enginesim
