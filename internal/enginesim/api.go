package enginesim

import (
	"encoding/json"
	"strings"
)

// completionRequest holds the fields of chat and text completion requests the engine uses.
type completionRequest struct {
	Model         string          `json:"model"`
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

// chatPrompt flattens messages into one prompt text, keeping role boundaries so that a
// shared conversation prefix gives a shared text prefix.
func (r *completionRequest) chatPrompt() string {
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>")
		b.WriteString(contentText(m.Content))
		b.WriteString("\n")
	}
	b.WriteString("<|assistant|>")
	return b.String()
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

// textPrompt reads a completion prompt given as a string, a list of strings, or token ids
// (each id counting as one 4-byte token).
func (r *completionRequest) textPrompt() (string, bool) {
	var s string
	if json.Unmarshal(r.Prompt, &s) == nil {
		return s, true
	}
	var list []string
	if json.Unmarshal(r.Prompt, &list) == nil {
		return strings.Join(list, ""), true
	}
	var ids []int
	if json.Unmarshal(r.Prompt, &ids) == nil {
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(tokenText(id))
		}
		return b.String(), true
	}
	return "", false
}

// tokenText renders a token id as exactly bytesPerToken bytes.
func tokenText(id int) string {
	const hex = "0123456789abcdef"
	var b [bytesPerToken]byte
	for i := range b {
		b[bytesPerToken-1-i] = hex[(id>>(4*i))&0xf]
	}
	return string(b[:])
}

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
