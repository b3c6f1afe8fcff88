package openai_test

import (
	"testing"

	"github.com/switchboard-llm/switchboard/internal/openai"
)

func TestEndpointOf(t *testing.T) {
	tests := []struct {
		path string
		want openai.Endpoint
	}{
		{"/v1/chat/completions", openai.EndpointChatCompletions},
		{"/v1/completions", openai.EndpointCompletions},
		{"/v1/embeddings", openai.EndpointEmbeddings},
		{"/v1/responses", openai.EndpointResponses},
		{"/v1/rerank", openai.EndpointRerank},
		{"/rerank", openai.EndpointRerank},
		{"/v2/rerank", openai.EndpointRerank},
		{"/v1/score", openai.EndpointScore},
		{"/score", openai.EndpointScore},
		{"/v1/audio/transcriptions", openai.EndpointAudioTranscriptions},
		{"/v1/audio/translations", openai.EndpointAudioTranslations},
		{"/tokenize", openai.EndpointTokenize},
		{"/detokenize", openai.EndpointDetokenize},
		{"/v1/chat/completions/", openai.EndpointOther},
		{"/V1/chat/completions", openai.EndpointOther},
		{"/openai/v1/chat/completions", openai.EndpointOther},
		{"/v1/classify", openai.EndpointOther},
		{"/pooling", openai.EndpointOther},
		{"/v1/tokenize", openai.EndpointOther},
		{"", openai.EndpointOther},
		{"/", openai.EndpointOther},
	}
	for _, tt := range tests {
		if got := openai.EndpointOf(tt.path); got != tt.want {
			t.Errorf("EndpointOf(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestEndpointStringAndMultipart(t *testing.T) {
	names := map[string]openai.Endpoint{}
	for ep := openai.EndpointOther; ep <= openai.EndpointDetokenize; ep++ {
		name := ep.String()
		if other, dup := names[name]; dup || name == "" {
			t.Errorf("Endpoint(%d).String() = %q, also the name of Endpoint(%d)", ep, name, other)
		}
		names[name] = ep
		wantMultipart := ep == openai.EndpointAudioTranscriptions || ep == openai.EndpointAudioTranslations
		if ep.Multipart() != wantMultipart {
			t.Errorf("%v.Multipart() = %v, want %v", ep, ep.Multipart(), wantMultipart)
		}
	}
	if got := openai.Endpoint(200).String(); got != "other" {
		t.Errorf("Endpoint(200).String() = %q, want other", got)
	}
	if got := openai.EndpointChatCompletions.String(); got != "chat_completions" {
		t.Errorf("EndpointChatCompletions.String() = %q", got)
	}
}
