// Package prefixcache implements the prefix-cache routing strategy (DESIGN §6, the
// RoutingPolicy's spec.prefixCache): it sends each request to the endpoint where its
// first token is predicted soonest, counting the prefill that the prompt prefix an
// engine already holds in its KV cache saves against the wait behind that engine's
// batch and queue.
//
// The prompt is cut into blocks of BlockSize tokens, each token approximated as 4 bytes
// of prompt text (the rule of internal/enginesim and openai.Request.PromptTokens); only whole
// blocks count. Blocks are identified by chained xxhash hashes seeded with the model
// name (BlockHashes), so equal hashes mean equal prefixes of the same model. An Index
// remembers, per endpoint, a bounded LRU set of the block hashes routed to it (Learn).
// A request's prompt is hashed once, on its first decision, and the hashes cached on its
// RoutingContext for every retried decision and Learn; only the leading
// MaxBlocksPerEndpoint blocks are hashed, as no endpoint holds more of one prompt.
//
// The indexes of a gateway share a Budget of memory, accounted at BytesPerBlock per
// block: whatever the policies' bounds, a learner that takes the total beyond it evicts,
// before returning, the least recently used blocks of the endpoints learnt into least
// recently, across every index.
//
// The index follows what the engine really holds:
//   - its bound per endpoint is the engine's KV cache (vllm:cache_config_info
//     num_gpu_blocks × block_size, or SGLang's sglang:max_total_num_tokens, in the
//     router's blocks) when the engine reports it, so the index forgets about when the
//     engine evicts;
//   - a restart of the engine (its counters went back: endpoint.Profile.Epoch) voids
//     what was learnt about it;
//   - each answer's usage.prompt_tokens_details.cached_tokens (the gateway reads it from
//     the body, or from a stream's final usage chunk when the client asked for one)
//     settles the request's Receipt: when the engine held fewer blocks than expected, the
//     first block it lacked was evicted, and with it, as engines evict least recently
//     used blocks first, every block last routed no later than that one (Index.Trim).
//
// The decision (Pick) predicts, with internal/routing/ttft, for every candidate the wait
// before the engine runs the request plus the prefill of the prompt tokens beyond the
// leading blocks the index holds for it, at the engine's learnt prefill rate, and picks
// the minimum; among equal predictions the least loaded wins (fewest requests in flight,
// then fewest prompt tokens sent), remaining ties at random. A hot prefix thus spreads
// by itself: once its favoured engine's queue costs more than the prefill elsewhere, the
// next request goes elsewhere and that engine learns the prefix too. Once several engines
// hold it, it spreads by load: where the prompt's longest match is held by two candidates
// or more, a block that c candidates hold costs one without it only 1/c of its prefill
// (the replication credit), as the engine that prefills it can then take the requests
// that follow. A conversation's history, which one engine holds, earns no credit.
//
// Two settings keep a meaning on top of the prediction: a match below MinMatchRatio of
// the prompt's blocks counts as none, and LoadImbalanceThreshold stays a hard guard, an
// endpoint that the request would put more than that many requests in flight ahead of
// the idlest candidate being left out whatever its match. Score exposes the prediction
// to weighted policies as minus the predicted seconds (-Inf for endpoints the guard
// leaves out). Pick and Score always decide: before any engine speed is learnt, ttft's
// priors stand in.
//
// The package does not tokenize, scrape or watch pods; it forgets endpoints that left by
// asking a PodLookup, lazily, from the request path.
package prefixcache
