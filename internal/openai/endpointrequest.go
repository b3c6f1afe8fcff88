package openai

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ParseRequestFor reads the JSON body of a request to the endpoint ep (see EndpointOf)
// and returns what routing needs, with Endpoint set to ep. Every error it returns is a
// *RequestError, to be answered with 400: the body is not one JSON object, model is
// missing or empty, or a field ParseRequestFor reads is missing where the endpoint
// requires it or has the wrong type. Fields it does not read are not inspected, and
// JSON object keys are matched as encoding/json matches them, as on ParseRequest.
//
// Per endpoint, Prompt is the text prefix-aware routing works on, and Stream and
// MaxTokens are read where the endpoint has them:
//
//   - chat completions and completions: as ParseRequest, which this calls, except that
//     the body's shape must match the path: messages for chat completions, prompt for
//     completions.
//   - responses: Stream from stream, MaxTokens from max_output_tokens. Prompt is
//     "system: " + instructions + "\n" when instructions is a non-empty string, then
//     input flattened like chat messages: a string input as one message of role user,
//     and an array of input items as role + ": " + text + "\n" for each message item
//     (an item with a role whose type is "message" or absent), where text is the
//     content string or the concatenation of the text of its parts of type input_text
//     or output_text. Other items (function calls and their outputs, reasoning, item
//     references) contribute nothing, so a conversation's next turn, sent as the
//     earlier items plus new ones, extends the earlier Prompt. input is optional.
//   - embeddings: input, a string or a non-empty array of strings concatenated in
//     order; an array of token ids or of token-id arrays gives an empty Prompt. A body
//     with messages instead (vLLM's chat embeddings) is flattened like chat.
//   - rerank: query + "\n" followed by document + "\n" for each of documents, where a
//     document is a string or an object whose "text" is used. A query or documents
//     given as a multimodal object (vLLM's {"content": [...]}) contributes nothing.
//   - score: text_1 then text_2, each a string or an array of strings, each string
//     followed by "\n"; a multimodal object contributes nothing.
//   - tokenize: prompt, a string, or messages flattened like chat.
//   - detokenize and other paths: only the model is read; Prompt is empty.
//
// Audio transcriptions and translations take multipart bodies: ParseRequestFor
// rejects them, and the gateway reads them with ParseMultipart.
//
// In PromptLength mode Prompt is left empty and only PromptLen is set, which saves
// copying a long prompt for a router that does not read its text.
func ParseRequestFor(ep Endpoint, data []byte, mode PromptMode) (Request, error) {
	var (
		req Request
		err error
	)
	switch ep {
	case EndpointChatCompletions, EndpointCompletions:
		req, err = parseRequest(data, mode)
		switch {
		case err != nil:
		case ep == EndpointChatCompletions && !req.Chat:
			err = badRequest("messages is required: prompt is for /v1/completions")
		case ep == EndpointCompletions && req.Chat:
			err = badRequest("prompt is required: messages is for /v1/chat/completions")
		}
	case EndpointResponses:
		req, err = parseResponses(data)
	case EndpointEmbeddings:
		req, err = parseEmbeddings(data)
	case EndpointRerank:
		req, err = parseRerank(data)
	case EndpointScore:
		req, err = parseScore(data)
	case EndpointTokenize:
		req, err = parseTokenize(data)
	case EndpointAudioTranscriptions, EndpointAudioTranslations:
		err = badRequest("request body must be multipart/form-data")
	default: // EndpointDetokenize, EndpointOther and values outside the constants
		req, err = parseModelOnly(data)
	}
	if err != nil {
		return Request{}, err
	}
	req.Endpoint = ep
	if req.Prompt != "" { // the parsers of the other endpoints leave PromptLen to this
		req.PromptLen = len(req.Prompt)
	}
	if mode == PromptLength {
		req.Prompt = ""
	}
	return req, nil
}

// PromptMode says whether parsing builds the text of a request's prompt.
type PromptMode bool

const (
	// PromptText builds the text, Request.Prompt, and its length, Request.PromptLen.
	PromptText PromptMode = true
	// PromptLength sets only Request.PromptLen.
	PromptLength PromptMode = false
)

// parseModelOnly reads the model of a body whose other fields routing does not use.
func parseModelOnly(data []byte) (Request, error) {
	var b modelField
	model, err := decodeModelBody(data, &b)
	return Request{Model: model}, err
}

// responsesBody holds the fields parseResponses reads.
type responsesBody struct {
	modelField
	Stream          *bool           `json:"stream"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Instructions    *string         `json:"instructions"`
	Input           json.RawMessage `json:"input"`
}

// inputItem holds the fields of a responses input item that the prompt uses.
type inputItem struct {
	Type    *string         `json:"type"`
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

// responsesTextPart reports whether a responses content part of type typ carries
// prompt text: input_text in inputs, output_text in earlier outputs sent back.
func responsesTextPart(typ string) bool { return typ == "input_text" || typ == "output_text" }

// parseResponses reads a /v1/responses body as described on ParseRequestFor.
func parseResponses(data []byte) (Request, error) {
	var b responsesBody
	model, err := decodeModelBody(data, &b)
	if err != nil {
		return Request{}, err
	}
	req := Request{Model: model, Stream: b.Stream != nil && *b.Stream}
	if n := b.MaxOutputTokens; n != nil {
		if *n < 0 {
			return Request{}, badRequest("max_output_tokens must not be negative")
		}
		req.MaxTokens = *n
	}
	var sb strings.Builder
	if b.Instructions != nil && *b.Instructions != "" {
		sb.WriteString("system: ")
		sb.WriteString(*b.Instructions)
		sb.WriteByte('\n')
	}
	if err := writeInput(&sb, b.Input); err != nil {
		return Request{}, err
	}
	req.Prompt = sb.String()
	return req, nil
}

// writeInput appends a responses input: a string, an array of input items, or absent.
func writeInput(sb *strings.Builder, raw json.RawMessage) error {
	const shape = "input must be a string or an array of input items"
	if !present(raw) {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return &RequestError{Message: shape, Err: err}
		}
		sb.WriteString("user: ")
		sb.WriteString(s)
		sb.WriteByte('\n')
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return &RequestError{Message: shape, Err: err}
	}
	for i, rawItem := range items {
		var it inputItem
		if rawItem[0] != '{' {
			return badRequest("input[%d] must be an object", i)
		}
		if err := json.Unmarshal(rawItem, &it); err != nil {
			return &RequestError{Message: fmt.Sprintf("input[%d] must be an object with a string type and role", i), Err: err}
		}
		isMessage := it.Type == nil || *it.Type == "message"
		hasRole := it.Role != nil && *it.Role != ""
		switch {
		case isMessage && hasRole:
		case it.Type != nil && *it.Type == "message":
			return badRequest("input[%d].role is required", i)
		default: // not a message: contributes nothing
			continue
		}
		sb.WriteString(*it.Role)
		sb.WriteString(": ")
		if err := writeContent(sb, it.Content, responsesTextPart); err != nil {
			return &RequestError{Message: fmt.Sprintf("input[%d].content must be a string, an array of content parts or null", i), Err: err}
		}
		sb.WriteByte('\n')
	}
	return nil
}

// embeddingsBody holds the fields parseEmbeddings reads.
type embeddingsBody struct {
	modelField
	Input    json.RawMessage `json:"input"`
	Messages json.RawMessage `json:"messages"`
}

// parseEmbeddings reads a /v1/embeddings body as described on ParseRequestFor.
func parseEmbeddings(data []byte) (Request, error) {
	var b embeddingsBody
	model, err := decodeModelBody(data, &b)
	if err != nil {
		return Request{}, err
	}
	req := Request{Model: model}
	hasInput, hasMessages := present(b.Input), present(b.Messages)
	switch {
	case hasInput && hasMessages:
		return Request{}, badRequest("input and messages are mutually exclusive")
	case hasMessages:
		req.Chat = true
		req.Prompt, err = chatPrompt(b.Messages)
	case hasInput:
		req.Prompt, err = embeddingsInput(b.Input)
	default:
		return Request{}, badRequest("input is required")
	}
	if err != nil {
		return Request{}, err
	}
	return req, nil
}

// embeddingsInput reads an embeddings input: a string, a non-empty array of strings
// (concatenated in order), or a non-empty array of token ids or of token-id arrays
// (no prompt text).
func embeddingsInput(raw json.RawMessage) (string, error) {
	const shape = "input must be a string, an array of strings or an array of token ids"
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", &RequestError{Message: shape, Err: err}
		}
		return s, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", &RequestError{Message: shape, Err: err}
	}
	if len(list) == 0 {
		return "", badRequest("input must not be an empty array")
	}
	if list[0][0] != '"' { // token ids: validated, not read
		if err := checkTokenIDs(list); err != nil {
			return "", &RequestError{Message: shape, Err: err}
		}
		return "", nil
	}
	var sb strings.Builder
	for i, item := range list {
		var s string
		if err := json.Unmarshal(item, &s); err != nil || item[0] != '"' {
			return "", &RequestError{Message: fmt.Sprintf("input[%d] must be a string", i), Err: err}
		}
		sb.WriteString(s)
	}
	return sb.String(), nil
}

// checkTokenIDs reports an error unless list, a JSON array's elements, is a list of
// integers or a list of arrays of integers.
func checkTokenIDs(list []json.RawMessage) error {
	batch := list[0][0] == '['
	for _, item := range list {
		ids := []json.RawMessage{item}
		if batch {
			if item[0] != '[' {
				return fmt.Errorf("a token-id batch holding a JSON %s", item[:1])
			}
			ids = nil
			if err := json.Unmarshal(item, &ids); err != nil {
				return err
			}
		}
		for _, id := range ids {
			var n int64
			if c := id[0]; c != '-' && (c < '0' || c > '9') {
				return fmt.Errorf("a token id that is a JSON %s", id[:1])
			}
			if err := json.Unmarshal(id, &n); err != nil {
				return err
			}
		}
	}
	return nil
}

// rerankBody holds the fields parseRerank reads.
type rerankBody struct {
	modelField
	Query     json.RawMessage `json:"query"`
	Documents json.RawMessage `json:"documents"`
}

// parseRerank reads a rerank body as described on ParseRequestFor.
func parseRerank(data []byte) (Request, error) {
	var b rerankBody
	model, err := decodeModelBody(data, &b)
	if err != nil {
		return Request{}, err
	}
	if !present(b.Query) {
		return Request{}, badRequest("query is required")
	}
	if !present(b.Documents) {
		return Request{}, badRequest("documents is required")
	}
	var sb strings.Builder
	switch b.Query[0] {
	case '"':
		if err := writeLine(&sb, b.Query); err != nil {
			return Request{}, &RequestError{Message: "query must be a string or an object", Err: err}
		}
	case '{': // multimodal: no text
	default:
		return Request{}, badRequest("query must be a string or an object")
	}
	switch b.Documents[0] {
	case '[':
	case '{': // multimodal: no text
		return Request{Model: model, Prompt: sb.String()}, nil
	default:
		return Request{}, badRequest("documents must be an array or an object")
	}
	var docs []json.RawMessage
	if err := json.Unmarshal(b.Documents, &docs); err != nil {
		return Request{}, &RequestError{Message: "documents must be an array or an object", Err: err}
	}
	for i, doc := range docs {
		switch doc[0] {
		case '"':
			err = writeLine(&sb, doc)
		case '{':
			var d struct {
				Text *string `json:"text"`
			}
			if err = json.Unmarshal(doc, &d); err == nil && d.Text != nil {
				sb.WriteString(*d.Text)
				sb.WriteByte('\n')
			}
		default:
			err = fmt.Errorf("documents[%d] is a JSON %s", i, doc[:1])
		}
		if err != nil {
			return Request{}, &RequestError{Message: fmt.Sprintf("documents[%d] must be a string or an object with a string text", i), Err: err}
		}
	}
	return Request{Model: model, Prompt: sb.String()}, nil
}

// scoreBody holds the fields parseScore reads.
type scoreBody struct {
	modelField
	Text1 json.RawMessage `json:"text_1"`
	Text2 json.RawMessage `json:"text_2"`
}

// parseScore reads a score body as described on ParseRequestFor.
func parseScore(data []byte) (Request, error) {
	var b scoreBody
	model, err := decodeModelBody(data, &b)
	if err != nil {
		return Request{}, err
	}
	var sb strings.Builder
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"text_1", b.Text1}, {"text_2", b.Text2}} {
		if !present(f.raw) {
			return Request{}, badRequest("%s is required", f.name)
		}
		if err := writeScoreText(&sb, f.raw); err != nil {
			return Request{}, &RequestError{Message: f.name + " must be a string, an array of strings or an object", Err: err}
		}
	}
	return Request{Model: model, Prompt: sb.String()}, nil
}

// writeScoreText appends one side of a score request: a string or an array of
// strings, each followed by "\n", or a multimodal object, which has no text.
func writeScoreText(sb *strings.Builder, raw json.RawMessage) error {
	switch raw[0] {
	case '"':
		return writeLine(sb, raw)
	case '{':
		return nil
	case '[':
	default:
		return fmt.Errorf("a JSON %s", raw[:1])
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return err
	}
	for _, item := range list {
		if item[0] != '"' {
			return fmt.Errorf("an array holding a JSON %s", item[:1])
		}
		if err := writeLine(sb, item); err != nil {
			return err
		}
	}
	return nil
}

// writeLine appends the JSON string raw, decoded, and a newline.
func writeLine(sb *strings.Builder, raw json.RawMessage) error {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	sb.WriteString(s)
	sb.WriteByte('\n')
	return nil
}

// tokenizeBody holds the fields parseTokenize reads.
type tokenizeBody struct {
	modelField
	Prompt   *string         `json:"prompt"`
	Messages json.RawMessage `json:"messages"`
}

// parseTokenize reads a /tokenize body as described on ParseRequestFor.
func parseTokenize(data []byte) (Request, error) {
	var b tokenizeBody
	model, err := decodeModelBody(data, &b)
	if err != nil {
		return Request{}, err
	}
	req := Request{Model: model}
	switch hasMessages := present(b.Messages); {
	case hasMessages && b.Prompt != nil:
		return Request{}, badRequest("messages and prompt are mutually exclusive")
	case hasMessages:
		req.Chat = true
		if req.Prompt, err = chatPrompt(b.Messages); err != nil {
			return Request{}, err
		}
	case b.Prompt != nil:
		req.Prompt = *b.Prompt
	default:
		return Request{}, badRequest("prompt or messages is required")
	}
	return req, nil
}
