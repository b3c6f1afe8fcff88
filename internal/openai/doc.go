// Package openai reads and answers the OpenAI-compatible HTTP API at the gateway's edge:
// ParseRequest extracts what routing needs from a /v1/chat/completions or /v1/completions
// body (model, stream flag, flattened prompt text, requested completion length), and
// WriteError writes errors in OpenAI's {"error":{...}} shape.
//
// The package does not validate a request beyond those fields, rewrite bodies, proxy
// them or map routing errors to HTTP statuses; the gateway does. It does not tokenize:
// EstimateTokens approximates token counts until a tokenizer is configured.
package openai
