package enginesim

import (
	"encoding/json"
	"strings"
)

// modelRequest is the field every inference request has: the model it is for, the base
// model or a loaded adapter.
type modelRequest struct {
	Model string `json:"model"`
}

func (m *modelRequest) requestedModel() string { return m.Model }

// completionRequest holds the fields of chat and text completion requests the engine uses.
type completionRequest struct {
	modelRequest
	Messages      []chatMessage   `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     int             `json:"max_tokens"`
	MaxCompletion int             `json:"max_completion_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// maxTokens is the requested output length, 0 when unset.
func (r *completionRequest) maxTokens() int {
	if r.MaxCompletion > 0 {
		return r.MaxCompletion
	}
	return r.MaxTokens
}

// Message is a chat message as the engine's prompt template reads it.
type Message struct {
	Role, Text string
}

// ChatPrompt flattens messages into the one prompt text the engine prefills, keeping role
// boundaries so that a shared conversation prefix gives a shared text prefix.
func ChatPrompt(messages []Message) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>")
		b.WriteString(m.Text)
		b.WriteString("\n")
	}
	b.WriteString("<|assistant|>")
	return b.String()
}

// chatPrompt is ChatPrompt of a request's messages.
func chatPrompt(messages []chatMessage) string {
	flat := make([]Message, len(messages))
	for i, m := range messages {
		flat[i] = Message{Role: m.Role, Text: contentText(m.Content)}
	}
	return ChatPrompt(flat)
}

// contentText reads a message content given as a string or as an array of text parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// textPrompt reads a completion prompt as one text, joining a list of prompts.
func (r *completionRequest) textPrompt() (string, bool) {
	prompts, ok := promptList(r.Prompt)
	return strings.Join(prompts, ""), ok
}

// textContent is a message content holding text s.
func textContent(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// promptList reads prompts given as a string, a list of strings, a list of token ids (one
// prompt) or a list of token-id lists; token ids stand for text as [tokenText] renders it.
func promptList(raw json.RawMessage) ([]string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, true
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return list, true
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return []string{idsText(ids)}, true
	}
	var batch [][]int
	if json.Unmarshal(raw, &batch) == nil {
		prompts := make([]string, len(batch))
		for i, ids := range batch {
			prompts[i] = idsText(ids)
		}
		return prompts, true
	}
	return nil, false
}

// usage is vLLM's UsageInfo; pooling requests (embeddings, scores) have no completion
// tokens and no prompt token details.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
}

func newUsage(r generationResult) *usage {
	u := &usage{PromptTokens: r.promptTokens, CompletionTokens: r.completionTokens, TotalTokens: r.promptTokens + r.completionTokens}
	u.PromptTokensDetails = &struct {
		CachedTokens int `json:"cached_tokens"`
	}{r.cachedTokens}
	return u
}

func poolingUsage(promptTokens int) *usage {
	return &usage{PromptTokens: promptTokens, TotalTokens: promptTokens}
}

// errorBody is vLLM's (and OpenAI's) error response.
type errorBody struct {
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

type modelCard struct {
	ID      string  `json:"id"`
	Object  string  `json:"object"`
	Created int64   `json:"created"`
	OwnedBy string  `json:"owned_by"`
	Root    string  `json:"root"`
	Parent  *string `json:"parent"`
}
