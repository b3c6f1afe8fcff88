package enginesim

// completionWriter builds the response bodies of one completion, chat or text.
type completionWriter struct {
	chat    bool
	id      string
	model   string
	created int64
}

func (c completionWriter) object(chunk bool) string {
	switch {
	case c.chat && chunk:
		return "chat.completion.chunk"
	case c.chat:
		return "chat.completion"
	default:
		return "text_completion"
	}
}

// final is the non-streaming response.
func (c completionWriter) final(text string, res generationResult) map[string]any {
	choice := map[string]any{"index": 0, "finish_reason": res.finishReason, "logprobs": nil}
	if c.chat {
		choice["message"] = map[string]any{"role": "assistant", "content": text}
	} else {
		choice["text"] = text
	}
	return map[string]any{
		"id": c.id, "object": c.object(false), "created": c.created, "model": c.model,
		"choices": []any{choice}, "usage": newUsage(res),
	}
}

// chunk is one streamed chunk: delta is a chat delta object or a text piece.
func (c completionWriter) chunk(delta any, finishReason *string) map[string]any {
	choice := map[string]any{"index": 0, "finish_reason": finishReason, "logprobs": nil}
	if c.chat {
		choice["delta"] = delta
	} else {
		choice["text"] = delta
	}
	return map[string]any{"id": c.id, "object": c.object(true), "created": c.created, "model": c.model, "choices": []any{choice}}
}

// usageChunk is the last streamed chunk when stream_options.include_usage is set.
func (c completionWriter) usageChunk(res generationResult) map[string]any {
	return map[string]any{
		"id": c.id, "object": c.object(true), "created": c.created, "model": c.model,
		"choices": []any{}, "usage": newUsage(res),
	}
}
