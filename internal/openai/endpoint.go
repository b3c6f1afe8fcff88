package openai

// Endpoint is the OpenAI-compatible API a request path belongs to. It decides how the
// gateway reads the request body: ParseRequestFor for JSON endpoints, ParseMultipart
// for the endpoints whose Multipart method reports true.
type Endpoint uint8

const (
	// EndpointOther is any path not listed below. The gateway still proxies it
	// unchanged, routed by model, when its body is a JSON object that names one.
	EndpointOther Endpoint = iota
	// EndpointChatCompletions is /v1/chat/completions.
	EndpointChatCompletions
	// EndpointCompletions is /v1/completions.
	EndpointCompletions
	// EndpointEmbeddings is /v1/embeddings.
	EndpointEmbeddings
	// EndpointResponses is /v1/responses.
	EndpointResponses
	// EndpointRerank is /v1/rerank, /rerank or /v2/rerank.
	EndpointRerank
	// EndpointScore is /v1/score or /score.
	EndpointScore
	// EndpointAudioTranscriptions is /v1/audio/transcriptions; its body is
	// multipart/form-data.
	EndpointAudioTranscriptions
	// EndpointAudioTranslations is /v1/audio/translations; its body is
	// multipart/form-data.
	EndpointAudioTranslations
	// EndpointTokenize is /tokenize.
	EndpointTokenize
	// EndpointDetokenize is /detokenize.
	EndpointDetokenize
)

// endpointNames are the values String returns, indexed by Endpoint.
var endpointNames = [...]string{
	EndpointOther:               "other",
	EndpointChatCompletions:     "chat_completions",
	EndpointCompletions:         "completions",
	EndpointEmbeddings:          "embeddings",
	EndpointResponses:           "responses",
	EndpointRerank:              "rerank",
	EndpointScore:               "score",
	EndpointAudioTranscriptions: "audio_transcriptions",
	EndpointAudioTranslations:   "audio_translations",
	EndpointTokenize:            "tokenize",
	EndpointDetokenize:          "detokenize",
}

// String returns a stable lower-case name for e ("chat_completions", "rerank", ...),
// suitable as a log value or metric label. Values outside the constants above are
// named "other", as EndpointOf would classify them.
func (e Endpoint) String() string {
	if int(e) < len(endpointNames) {
		return endpointNames[e]
	}
	return endpointNames[EndpointOther]
}

// Multipart reports whether requests to e carry a multipart/form-data body, to be read
// with ParseMultipart rather than ParseRequestFor.
func (e Endpoint) Multipart() bool {
	return e == EndpointAudioTranscriptions || e == EndpointAudioTranslations
}

// EndpointOf classifies a request path: the URL path without query, as the engine
// will receive it (after any prefix rewrite the route applies). Matching is exact and
// case-sensitive, as the engines' routers match; any other path, including one with a
// trailing slash, is EndpointOther.
func EndpointOf(path string) Endpoint {
	switch path {
	case "/v1/chat/completions":
		return EndpointChatCompletions
	case "/v1/completions":
		return EndpointCompletions
	case "/v1/embeddings":
		return EndpointEmbeddings
	case "/v1/responses":
		return EndpointResponses
	case "/v1/rerank", "/rerank", "/v2/rerank":
		return EndpointRerank
	case "/v1/score", "/score":
		return EndpointScore
	case "/v1/audio/transcriptions":
		return EndpointAudioTranscriptions
	case "/v1/audio/translations":
		return EndpointAudioTranslations
	case "/tokenize":
		return EndpointTokenize
	case "/detokenize":
		return EndpointDetokenize
	default:
		return EndpointOther
	}
}
