// Package prefixcache implements the prefix-cache routing strategy (DESIGN §6, the
// RoutingPolicy's spec.prefixCache): it sends a request to an endpoint that has recently
// served the longest prefix of its prompt, whose engine therefore probably still holds
// that prefix's KV cache, unless doing so would overload that endpoint.
//
// The prompt is cut into blocks of BlockSize tokens, each token approximated as 4 bytes
// of prompt text (the rule of internal/enginesim and openai.EstimateTokens); only whole
// blocks count. Blocks are identified by chained xxhash hashes seeded with the model
// name (BlockHashes), so equal hashes mean equal prefixes of the same model. An Index
// remembers, per endpoint, a bounded LRU set of the block hashes routed to it (Learn);
// the score of an endpoint is the fraction of the prompt's leading blocks it holds.
// A Tokenizer interface could later replace the 4-bytes-per-token rule by real token
// boundaries without changing the index.
//
// The load guard keeps a hot prefix, such as one long system prompt shared by every
// request, from pinning all traffic to one endpoint: among endpoints with the same best
// match the least loaded wins, and an endpoint with more than LoadImbalanceThreshold
// requests in flight beyond the idlest candidate is left out of the decision, so its
// traffic goes to others, which then learn the prefix too. Only the overloaded endpoint
// loses its conversations; the others keep theirs.
//
// The strategy uses no engine metrics, so it never lacks fresh data: Pick always
// decides (the least-loaded candidate when no prefix helps), and Score returns
// routing.ErrUndecided only for prompts shorter than one block, leaving them to the
// policy's fallback or to the other terms of a weighted policy.
//
// The package does not tokenize, read engine prefix-cache metrics or watch pods; it
// forgets endpoints that left by asking a PodLookup, lazily, from the request path.
package prefixcache
