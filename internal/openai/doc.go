// Package openai reads and answers the OpenAI-compatible HTTP API at the gateway's edge.
// EndpointOf classifies a request path (chat completions, completions, embeddings,
// responses, rerank, score, audio transcriptions and translations, tokenize,
// detokenize, or other); ParseRequestFor extracts what routing needs from a JSON body
// for that endpoint (model, stream flag, the prompt text prefix-aware routing works on,
// requested output length), ParseRequest does so for /v1/chat/completions and
// /v1/completions bodies on the allocation-light path, and ParseMultipart for the
// multipart/form-data bodies of the audio endpoints, scanning the buffered body in
// place. WriteError writes errors in OpenAI's {"error":{...}} shape.
//
// The package does not validate a request beyond those fields, rewrite bodies, proxy
// them or map routing errors to HTTP statuses; the gateway does. It does not tokenize:
// Request.PromptTokens approximates token counts until a tokenizer is configured.
package openai
