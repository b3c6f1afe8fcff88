package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Request is what the gateway reads from an OpenAI-compatible request body to route it.
type Request struct {
	// Model is the requested model or adapter name; never empty.
	Model string
	// Stream reports whether the client asked for a server-sent-event stream; always
	// false for endpoints that do not stream.
	Stream bool
	// Prompt is the text prefix-aware routing works on: for chat requests the messages
	// flattened as described on ParseRequest, for completion requests the prompt
	// strings concatenated in order, and for the other endpoints what ParseRequestFor
	// and ParseMultipart describe. It may be empty, and is when it was parsed in
	// PromptLength mode.
	Prompt string
	// PromptLen is the length of that text in bytes, also in PromptLength mode.
	PromptLen int
	// MaxTokens is the requested output length (max_completion_tokens, else
	// max_tokens; max_output_tokens for responses); 0 when the request does not say or
	// the endpoint generates no tokens.
	MaxTokens int64
	// Chat reports whether the body is a chat request (it has messages), whatever the
	// endpoint: chat completions, and tokenize or embeddings requests with messages.
	Chat bool
	// Endpoint is the endpoint the body was read for. ParseRequest, which does not
	// know the path, sets EndpointChatCompletions or EndpointCompletions by the body's
	// shape.
	Endpoint Endpoint
}

// RequestError reports a request body the gateway rejects with 400
// invalid_request_error. Its Message is meant for the client.
type RequestError struct {
	// Message says what is wrong with the body, naming the offending field.
	Message string
	// Err is the underlying decoding error, if any; it is not shown to clients.
	Err error
}

// Error returns the client-facing message.
func (e *RequestError) Error() string { return e.Message }

// Unwrap returns the underlying decoding error.
func (e *RequestError) Unwrap() error { return e.Err }

// badRequest returns a *RequestError with a formatted message.
func badRequest(format string, args ...any) *RequestError {
	return &RequestError{Message: fmt.Sprintf(format, args...)}
}

// body holds the fields ParseRequest reads; prompt and content shapes vary, so they
// stay raw until inspected.
type body struct {
	modelField
	Stream              *bool           `json:"stream"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
}

type message struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ParseRequest reads a chat completion body (with "messages") or a text completion body
// (with "prompt"). Every error it returns is a *RequestError: the body is not one JSON
// object, model is missing or empty, neither or both of messages and prompt are given,
// or a field has the wrong type or a negative length.
//
// A chat request's Prompt is the concatenation, in message order, of
// role + ": " + text + "\n" for each message, where text is the content string, or the
// concatenation of the "text" of the content parts of type "text" (other parts, and a
// null content, contribute nothing). The flattening is deterministic and message-local,
// so the Prompt of a conversation's next turn starts with the Prompt of its earlier
// messages; prefix-cache routing relies on that.
//
// A completion request's prompt is a string or a non-empty array of strings, which are
// concatenated without separator; arrays of token ids are rejected, because routing
// works on text until a tokenizer is configured.
//
// JSON object keys are matched as encoding/json matches them (case-insensitively,
// the last duplicate wins). Fields other than those of Request are not inspected.
//
// ParseRequest does not know the request path: it sets Endpoint by the body's shape.
// ParseRequestFor reads a body for a given endpoint, these two included.
func ParseRequest(data []byte) (Request, error) {
	// The single pass of parseFast (fastparse.go) accepts the common shape of a valid body.
	// Anything else, in particular every body that is to be rejected, goes through
	// parseRequestJSON, which defines the behaviour and the exact error messages.
	return parseRequest(data, PromptText)
}

// parseRequest is ParseRequest in mode.
func parseRequest(data []byte, mode PromptMode) (Request, error) {
	if req, ok := parseFast(data, mode == PromptText); ok {
		return req, nil
	}
	return parseRequestJSON(data)
}

// parseRequestJSON is ParseRequest implemented with encoding/json. It reads the body
// several times over, so ParseRequest uses it only where parseFast gives up.
func parseRequestJSON(data []byte) (Request, error) {
	var b body
	model, err := decodeModelBody(data, &b)
	if err != nil {
		return Request{}, err
	}
	req := Request{Model: model, Stream: b.Stream != nil && *b.Stream}

	switch n := b.MaxCompletionTokens; {
	case n != nil && *n < 0:
		return Request{}, badRequest("max_completion_tokens must not be negative")
	case n != nil:
		req.MaxTokens = *n
	case b.MaxTokens != nil && *b.MaxTokens < 0:
		return Request{}, badRequest("max_tokens must not be negative")
	case b.MaxTokens != nil:
		req.MaxTokens = *b.MaxTokens
	}

	hasMessages, hasPrompt := present(b.Messages), present(b.Prompt)
	switch {
	case hasMessages && hasPrompt:
		return Request{}, badRequest("messages and prompt are mutually exclusive")
	case hasMessages:
		req.Chat, req.Endpoint = true, EndpointChatCompletions
		req.Prompt, err = chatPrompt(b.Messages)
	case hasPrompt:
		req.Endpoint = EndpointCompletions
		req.Prompt, err = textPrompt(b.Prompt)
	default:
		return Request{}, badRequest("messages (chat) or prompt (completions) is required")
	}
	if err != nil {
		return Request{}, err
	}
	req.PromptLen = len(req.Prompt)
	return req, nil
}

// decodeObject decodes a JSON object body into v, a pointer to a struct, with
// encoding/json's rules. Every error it returns is a *RequestError.
func decodeObject(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return decodeError(err)
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return badRequest("request body must be a JSON object")
	}
	return nil
}

// modelField is the "model" field of every body; each body type embeds it.
type modelField struct {
	Model *string `json:"model"`
}

func (f *modelField) model() *string { return f.Model }

// modelBody is a body type that embeds modelField.
type modelBody interface{ model() *string }

// decodeModelBody decodes data into b (decodeObject) and returns the model it names
// (requireModel).
func decodeModelBody(data []byte, b modelBody) (string, error) {
	if err := decodeObject(data, b); err != nil {
		return "", err
	}
	return requireModel(b.model())
}

// requireModel returns the model a body names, or a *RequestError when it names none.
func requireModel(model *string) (string, error) {
	if model == nil || *model == "" {
		return "", badRequest("model is required")
	}
	return *model, nil
}

// present reports whether a raw field was given with a non-null value.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// decodeError turns an encoding/json error into a client-facing *RequestError.
func decodeError(err error) *RequestError {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field == "" {
			return &RequestError{Message: "request body must be a JSON object", Err: err}
		}
		return &RequestError{Message: fmt.Sprintf("%s must be %s, not a JSON %s",
			typeErr.Field, describe(typeErr.Type.Kind().String()), typeErr.Value), Err: err}
	}
	return &RequestError{Message: "request body is not valid JSON: " + err.Error(), Err: err}
}

// describe names the JSON type a Go kind of a body field is decoded from.
func describe(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int64":
		return "an integer"
	default:
		return "a valid value"
	}
}

// chatPrompt flattens chat messages as described on ParseRequest.
func chatPrompt(raw json.RawMessage) (string, error) {
	var msgs []json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return "", &RequestError{Message: "messages must be an array of message objects", Err: err}
	}
	if len(msgs) == 0 {
		return "", badRequest("messages must not be empty")
	}
	var sb strings.Builder
	for i, rawMsg := range msgs {
		var m message
		if err := json.Unmarshal(rawMsg, &m); err != nil || bytes.Equal(rawMsg, []byte("null")) {
			return "", &RequestError{Message: fmt.Sprintf("messages[%d] must be an object with a string role", i), Err: err}
		}
		if m.Role == nil || *m.Role == "" {
			return "", badRequest("messages[%d].role is required", i)
		}
		sb.WriteString(*m.Role)
		sb.WriteString(": ")
		if err := writeContent(&sb, m.Content, chatTextPart); err != nil {
			return "", &RequestError{Message: fmt.Sprintf("messages[%d].content must be a string, an array of content parts or null", i), Err: err}
		}
		sb.WriteByte('\n')
	}
	return sb.String(), nil
}

// chatTextPart reports whether a chat content part of type typ carries prompt text.
func chatTextPart(typ string) bool { return typ == "text" }

// writeContent appends the text of one message content: a string, an array of content
// parts (only parts whose type isText accepts count) or null.
func writeContent(sb *strings.Builder, raw json.RawMessage, isText func(typ string) bool) error {
	if !present(raw) {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		sb.WriteString(s)
		return nil
	}
	var parts []*contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return err
	}
	for _, p := range parts {
		if p == nil {
			return errors.New("null content part")
		}
		if isText(p.Type) {
			sb.WriteString(p.Text)
		}
	}
	return nil
}

// textPrompt reads a completion prompt: a string or a non-empty array of strings,
// concatenated in order.
func textPrompt(raw json.RawMessage) (string, error) {
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", &RequestError{Message: "prompt must be a string or an array of strings", Err: err}
		}
		return s, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", &RequestError{Message: "prompt must be a string or an array of strings", Err: err}
	}
	if len(list) == 0 {
		return "", badRequest("prompt must not be an empty array")
	}
	var sb strings.Builder
	for i, item := range list {
		if item[0] != '"' {
			if item[0] == '[' || item[0] == '-' || (item[0] >= '0' && item[0] <= '9') {
				return "", badRequest("prompt: token id arrays are not supported; send the prompt as text")
			}
			return "", badRequest("prompt[%d] must be a string", i)
		}
		var s string
		if err := json.Unmarshal(item, &s); err != nil {
			return "", &RequestError{Message: fmt.Sprintf("prompt[%d] must be a string", i), Err: err}
		}
		sb.WriteString(s)
	}
	return sb.String(), nil
}

// bytesPerToken is the number of prompt bytes counted as one token, the approximation
// internal/enginesim and prefix-cache routing share.
const bytesPerToken = 4

// PromptTokens approximates the token count of the prompt as ceil(PromptLen/4), counting
// bytes. It is the approximation Switchboard uses until a tokenizer is configured, the
// same rule as internal/enginesim's, so the gateway's counts agree with the simulator's.
func (r *Request) PromptTokens() int64 {
	return (int64(r.PromptLen) + bytesPerToken - 1) / bytesPerToken
}
