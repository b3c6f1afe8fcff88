package enginesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// responsesRequest holds the fields of an OpenAI Responses API request the engine uses.
type responsesRequest struct {
	modelRequest
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
}

// responsesInputItem is an input message: a role and a content string or list of parts.
type responsesInputItem struct {
	Type string `json:"type"`
	chatMessage
}

// prompt flattens the instructions (as a system message) and the input into the chat
// prompt the engine runs.
func (r *responsesRequest) prompt() (string, error) {
	var messages []chatMessage
	if r.Instructions != nil {
		messages = append(messages, chatMessage{Role: "system", Content: textContent(*r.Instructions)})
	}
	var text string
	var items []responsesInputItem
	switch {
	case len(r.Input) == 0 || string(r.Input) == "null":
	case json.Unmarshal(r.Input, &text) == nil:
		return chatPrompt(append(messages, chatMessage{Role: "user", Content: textContent(text)})), nil
	case json.Unmarshal(r.Input, &items) == nil && len(items) > 0:
		for _, item := range items {
			if item.Type != "" && item.Type != "message" {
				return "", fmt.Errorf("input item type %q is not supported", item.Type)
			}
			messages = append(messages, item.chatMessage)
		}
		return chatPrompt(messages), nil
	}
	return "", errors.New("input must be a string or a non-empty list of input messages")
}

// responseWriter builds the bodies of one Responses API answer, which has a single output
// message.
type responseWriter struct {
	req       *responsesRequest
	id, msgID string
	createdAt int64
}

// response is the response object with the given status, output and usage (nil while in
// progress).
func (c responseWriter) response(status string, output []any, u map[string]any) map[string]any {
	return map[string]any{
		"id": c.id, "object": "response", "created_at": c.createdAt, "model": c.req.Model,
		"status": status, "output": output, "usage": u, "error": nil, "incomplete_details": nil,
		"instructions": c.req.Instructions, "max_output_tokens": c.req.MaxOutputTokens,
		"metadata": map[string]string{}, "parallel_tool_calls": true, "previous_response_id": nil,
		"temperature": 1.0, "top_p": 1.0, "tool_choice": "auto", "tools": []any{},
		"text": map[string]any{"format": map[string]string{"type": "text"}}, "truncation": "disabled",
	}
}

// message is the output message: empty while in progress, holding text once completed.
func (c responseWriter) message(status, text string) map[string]any {
	content := []any{}
	if status == "completed" {
		content = append(content, outputText(text))
	}
	return map[string]any{"type": "message", "id": c.msgID, "role": "assistant", "status": status, "content": content}
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// inText adds the fields that locate an event in the output message's text part.
func (c responseWriter) inText(fields map[string]any) map[string]any {
	fields["item_id"], fields["output_index"], fields["content_index"] = c.msgID, 0, 0
	return fields
}

func responseUsage(res generationResult) map[string]any {
	return map[string]any{
		"input_tokens": res.promptTokens, "input_tokens_details": map[string]int{"cached_tokens": res.cachedTokens},
		"output_tokens": res.completionTokens, "output_tokens_details": map[string]int{"reasoning_tokens": 0},
		"total_tokens": res.promptTokens + res.completionTokens,
	}
}

// handleResponses serves POST /v1/responses, streamed or not. A response always completes:
// reaching max_output_tokens is how the simulator ends a generation, not a truncation.
func (e *Engine) handleResponses(w http.ResponseWriter, r *http.Request) {
	var req responsesRequest
	adapter, ok := e.decodeRequest(w, r, &req)
	if !ok {
		return
	}
	prompt, err := req.prompt()
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	if e.injectedFailure(w) {
		return
	}
	g := generation{prompt: prompt, adapter: adapter}
	if req.MaxOutputTokens != nil {
		g.maxTokens = *req.MaxOutputTokens
	}
	c := responseWriter{req: &req, id: e.newID("resp_"), msgID: e.newID("msg_"), createdAt: time.Now().Unix()}
	if req.Stream {
		e.streamResponse(w, r, g, c)
		return
	}
	if text, res, ok := e.generateText(r.Context(), g); ok {
		writeJSON(w, http.StatusOK, c.response("completed", []any{c.message("completed", text)}, responseUsage(res)))
	}
}

// streamResponse streams a response as the Responses API's server-sent events.
func (e *Engine) streamResponse(w http.ResponseWriter, r *http.Request, g generation, c responseWriter) {
	sse := newSSEWriter(w)
	seq := 0
	emit := func(event string, fields map[string]any) error {
		fields["type"], fields["sequence_number"] = event, seq
		seq++
		return sse.send(event, fields)
	}
	inProgress := c.response("in_progress", []any{}, nil)
	_ = emit("response.created", map[string]any{"response": inProgress})
	_ = emit("response.in_progress", map[string]any{"response": inProgress})
	_ = emit("response.output_item.added", map[string]any{"output_index": 0, "item": c.message("in_progress", "")})
	_ = emit("response.content_part.added", c.inText(map[string]any{"part": outputText("")}))
	var text strings.Builder
	res, ok := e.streamTokens(r.Context(), g, func(tok string) error {
		text.WriteString(tok)
		return emit("response.output_text.delta", c.inText(map[string]any{"delta": tok, "logprobs": []any{}}))
	})
	if !ok {
		return
	}
	done := c.message("completed", text.String())
	_ = emit("response.output_text.done", c.inText(map[string]any{"text": text.String(), "logprobs": []any{}}))
	_ = emit("response.content_part.done", c.inText(map[string]any{"part": outputText(text.String())}))
	_ = emit("response.output_item.done", map[string]any{"output_index": 0, "item": done})
	_ = emit("response.completed", map[string]any{"response": c.response("completed", []any{done}, responseUsage(res))})
}
