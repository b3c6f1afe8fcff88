package openai_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-llm/switchboard/internal/openai"
)

// endpointCases are the table of TestParseRequestFor and the seed corpus of
// FuzzParseRequestFor. want.Endpoint is filled in from ep.
var endpointCases = []struct {
	name    string
	ep      openai.Endpoint
	body    string
	want    openai.Request
	wantErr string // substring of the RequestError message; empty when parsing succeeds
}{
	// Chat completions and completions: ParseRequest, with the body's shape checked.
	{name: "chat", ep: openai.EndpointChatCompletions,
		body: `{"model":"m","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`,
		want: openai.Request{Model: "m", Stream: true, MaxTokens: 9, Chat: true, Prompt: "user: hi\n"}},
	{name: "chat path with a completion body", ep: openai.EndpointChatCompletions,
		body: `{"model":"m","prompt":"p"}`, wantErr: "messages is required"},
	{name: "chat path with a bad body", ep: openai.EndpointChatCompletions,
		body: `{"model":"m","messages":[]}`, wantErr: "messages must not be empty"},
	{name: "completion", ep: openai.EndpointCompletions,
		body: `{"model":"m","prompt":["a","b"],"max_tokens":3}`,
		want: openai.Request{Model: "m", MaxTokens: 3, Prompt: "ab"}},
	{name: "completions path with a chat body", ep: openai.EndpointCompletions,
		body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, wantErr: "prompt is required"},

	// Responses.
	{name: "responses with string input", ep: openai.EndpointResponses,
		body: `{"model":"gpt","input":"Tell me a joke","stream":true,"max_output_tokens":100,"temperature":1}`,
		want: openai.Request{Model: "gpt", Stream: true, MaxTokens: 100, Prompt: "user: Tell me a joke\n"}},
	{name: "responses with instructions and input items", ep: openai.EndpointResponses,
		body: `{"model":"gpt","instructions":"Be terse.","input":[
			{"role":"user","content":"q1"},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a1","annotations":[]}]},
			{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
			{"type":"function_call_output","call_id":"c","output":"42"},
			{"id":"msg_1"},
			{"type":"item_reference","id":"msg_2"},
			{"role":"user","content":[{"type":"input_text","text":"look "},{"type":"input_image","image_url":"http://x/y.png"},{"type":"input_text","text":"here"}]},
			{"role":"developer","content":null}]}`,
		want: openai.Request{Model: "gpt", Prompt: "system: Be terse.\nuser: q1\nassistant: a1\nuser: look here\ndeveloper: \n"}},
	{name: "responses without input", ep: openai.EndpointResponses,
		body: `{"model":"gpt","previous_response_id":"resp_1","instructions":"","input":null,"stream":null,"max_output_tokens":null}`,
		want: openai.Request{Model: "gpt"}},
	{name: "responses with empty input items", ep: openai.EndpointResponses,
		body: `{"model":"gpt","input":[]}`, want: openai.Request{Model: "gpt"}},
	{name: "responses missing model", ep: openai.EndpointResponses,
		body: `{"input":"x"}`, wantErr: "model is required"},
	{name: "responses negative max_output_tokens", ep: openai.EndpointResponses,
		body: `{"model":"m","max_output_tokens":-1}`, wantErr: "max_output_tokens must not be negative"},
	{name: "responses fractional max_output_tokens", ep: openai.EndpointResponses,
		body: `{"model":"m","max_output_tokens":2.5}`, wantErr: "max_output_tokens must be an integer"},
	{name: "responses stream of wrong type", ep: openai.EndpointResponses,
		body: `{"model":"m","stream":1}`, wantErr: "stream must be a boolean"},
	{name: "responses instructions of wrong type", ep: openai.EndpointResponses,
		body: `{"model":"m","instructions":["x"]}`, wantErr: "instructions must be a string"},
	{name: "responses input of wrong type", ep: openai.EndpointResponses,
		body: `{"model":"m","input":{"role":"user"}}`, wantErr: "input must be a string or an array of input items"},
	{name: "responses input item not an object", ep: openai.EndpointResponses,
		body: `{"model":"m","input":["hi"]}`, wantErr: "input[0] must be an object"},
	{name: "responses null input item", ep: openai.EndpointResponses,
		body: `{"model":"m","input":[null]}`, wantErr: "input[0] must be an object"},
	{name: "responses input item role of wrong type", ep: openai.EndpointResponses,
		body: `{"model":"m","input":[{"role":1,"content":"x"}]}`, wantErr: "input[0] must be an object with a string type and role"},
	{name: "responses message item without role", ep: openai.EndpointResponses,
		body: `{"model":"m","input":[{"role":"user","content":"x"},{"type":"message","content":"x"}]}`, wantErr: "input[1].role is required"},
	{name: "responses content of wrong type", ep: openai.EndpointResponses,
		body: `{"model":"m","input":[{"role":"user","content":7}]}`, wantErr: "input[0].content must be"},
	{name: "responses null content part", ep: openai.EndpointResponses,
		body: `{"model":"m","input":[{"role":"user","content":[null]}]}`, wantErr: "input[0].content must be"},

	// Embeddings.
	{name: "embeddings with string input", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":"hello","encoding_format":"float"}`,
		want: openai.Request{Model: "e5", Prompt: "hello"}},
	{name: "embeddings with string array input", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":["hello ","world"]}`,
		want: openai.Request{Model: "e5", Prompt: "hello world"}},
	{name: "embeddings with token ids", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":[1,2,-0,3]}`, want: openai.Request{Model: "e5"}},
	{name: "embeddings with a batch of token ids", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":[[1,2],[],[3]]}`, want: openai.Request{Model: "e5"}},
	{name: "embeddings with messages", ep: openai.EndpointEmbeddings,
		body: `{"model":"vlm2vec","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"cat"}]}]}`,
		want: openai.Request{Model: "vlm2vec", Chat: true, Prompt: "user: cat\n"}},
	{name: "embeddings ignore stream and max_tokens", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":"x","stream":"not read","max_tokens":-5}`,
		want: openai.Request{Model: "e5", Prompt: "x"}},
	{name: "embeddings missing model", ep: openai.EndpointEmbeddings,
		body: `{"input":"x","model":null}`, wantErr: "model is required"},
	{name: "embeddings missing input", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5"}`, wantErr: "input is required"},
	{name: "embeddings with input and messages", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":"x","messages":[{"role":"user","content":"y"}]}`, wantErr: "mutually exclusive"},
	{name: "embeddings empty input array", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":[]}`, wantErr: "input must not be an empty array"},
	{name: "embeddings input of wrong type", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":{"text":"x"}}`, wantErr: "input must be a string, an array of strings or an array of token ids"},
	{name: "embeddings strings then a number", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":["a",1]}`, wantErr: "input[1] must be a string"},
	{name: "embeddings token ids then a string", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":[1,"a"]}`, wantErr: "array of token ids"},
	{name: "embeddings null token id", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":[1,null]}`, wantErr: "array of token ids"},
	{name: "embeddings fractional token id", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":[[1.5]]}`, wantErr: "array of token ids"},
	{name: "embeddings token batch mixed with ids", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","input":[[1],2]}`, wantErr: "array of token ids"},
	{name: "embeddings bad messages", ep: openai.EndpointEmbeddings,
		body: `{"model":"e5","messages":[{"content":"x"}]}`, wantErr: "messages[0].role is required"},

	// Rerank.
	{name: "rerank with string documents", ep: openai.EndpointRerank,
		body: `{"model":"bge","query":"capital of France?","documents":["Paris is.","Berlin is not."],"top_n":1}`,
		want: openai.Request{Model: "bge", Prompt: "capital of France?\nParis is.\nBerlin is not.\n"}},
	{name: "rerank with document objects", ep: openai.EndpointRerank,
		body: `{"model":"bge","query":"q","documents":[{"text":"d1"},"d2",{"title":"no text"},{"text":null}]}`,
		want: openai.Request{Model: "bge", Prompt: "q\nd1\nd2\n"}},
	{name: "rerank with empty documents", ep: openai.EndpointRerank,
		body: `{"model":"bge","query":"q","documents":[]}`, want: openai.Request{Model: "bge", Prompt: "q\n"}},
	{name: "rerank with multimodal query and documents", ep: openai.EndpointRerank,
		body: `{"model":"bge","query":{"content":[{"type":"image_url"}]},"documents":{"content":[]}}`,
		want: openai.Request{Model: "bge"}},
	{name: "rerank missing model", ep: openai.EndpointRerank,
		body: `{"query":"q","documents":["d"]}`, wantErr: "model is required"},
	{name: "rerank missing query", ep: openai.EndpointRerank,
		body: `{"model":"bge","documents":["d"]}`, wantErr: "query is required"},
	{name: "rerank missing documents", ep: openai.EndpointRerank,
		body: `{"model":"bge","query":"q","documents":null}`, wantErr: "documents is required"},
	{name: "rerank query of wrong type", ep: openai.EndpointRerank,
		body: `{"model":"bge","query":["q"],"documents":["d"]}`, wantErr: "query must be a string or an object"},
	{name: "rerank documents of wrong type", ep: openai.EndpointRerank,
		body: `{"model":"bge","query":"q","documents":"d"}`, wantErr: "documents must be an array or an object"},
	{name: "rerank document of wrong type", ep: openai.EndpointRerank,
		body: `{"model":"bge","query":"q","documents":["d",3]}`, wantErr: "documents[1] must be a string or an object"},
	{name: "rerank document text of wrong type", ep: openai.EndpointRerank,
		body: `{"model":"bge","query":"q","documents":[{"text":3}]}`, wantErr: "documents[0] must be"},

	// Score.
	{name: "score with strings", ep: openai.EndpointScore,
		body: `{"model":"bge","text_1":"What is the capital?","text_2":"Paris."}`,
		want: openai.Request{Model: "bge", Prompt: "What is the capital?\nParis.\n"}},
	{name: "score with arrays", ep: openai.EndpointScore,
		body: `{"model":"bge","text_1":["a"],"text_2":["b","c"]}`,
		want: openai.Request{Model: "bge", Prompt: "a\nb\nc\n"}},
	{name: "score with a multimodal side", ep: openai.EndpointScore,
		body: `{"model":"bge","text_1":"a","text_2":{"content":[]}}`, want: openai.Request{Model: "bge", Prompt: "a\n"}},
	{name: "score missing model", ep: openai.EndpointScore,
		body: `{"text_1":"a","text_2":"b"}`, wantErr: "model is required"},
	{name: "score missing text_1", ep: openai.EndpointScore,
		body: `{"model":"bge","text_2":"b"}`, wantErr: "text_1 is required"},
	{name: "score missing text_2", ep: openai.EndpointScore,
		body: `{"model":"bge","text_1":"a"}`, wantErr: "text_2 is required"},
	{name: "score text_1 of wrong type", ep: openai.EndpointScore,
		body: `{"model":"bge","text_1":1,"text_2":"b"}`, wantErr: "text_1 must be a string, an array of strings or an object"},
	{name: "score text_2 array with a number", ep: openai.EndpointScore,
		body: `{"model":"bge","text_1":"a","text_2":["b",2]}`, wantErr: "text_2 must be"},

	// Tokenize and detokenize.
	{name: "tokenize prompt", ep: openai.EndpointTokenize,
		body: `{"model":"m","prompt":"hello","add_special_tokens":true}`, want: openai.Request{Model: "m", Prompt: "hello"}},
	{name: "tokenize messages", ep: openai.EndpointTokenize,
		body: `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"add_generation_prompt":true}`,
		want: openai.Request{Model: "m", Chat: true, Prompt: "system: s\nuser: u\n"}},
	{name: "tokenize missing model", ep: openai.EndpointTokenize,
		body: `{"prompt":"hello"}`, wantErr: "model is required"},
	{name: "tokenize missing prompt and messages", ep: openai.EndpointTokenize,
		body: `{"model":"m","prompt":null}`, wantErr: "prompt or messages is required"},
	{name: "tokenize with prompt and messages", ep: openai.EndpointTokenize,
		body: `{"model":"m","prompt":"p","messages":[{"role":"user","content":"u"}]}`, wantErr: "mutually exclusive"},
	{name: "tokenize prompt of wrong type", ep: openai.EndpointTokenize,
		body: `{"model":"m","prompt":["p"]}`, wantErr: "prompt must be a string"},
	{name: "tokenize bad messages", ep: openai.EndpointTokenize,
		body: `{"model":"m","messages":"hi"}`, wantErr: "messages must be an array"},
	{name: "detokenize", ep: openai.EndpointDetokenize,
		body: `{"model":"m","tokens":[1,2,3]}`, want: openai.Request{Model: "m"}},
	{name: "detokenize missing model", ep: openai.EndpointDetokenize,
		body: `{"tokens":[1]}`, wantErr: "model is required"},

	// Other paths and audio.
	{name: "other path naming a model", ep: openai.EndpointOther,
		body: `{"model":"m","input":"x","stream":true,"max_tokens":5}`, want: openai.Request{Model: "m"}},
	{name: "other path without a model", ep: openai.EndpointOther,
		body: `{"input":"x"}`, wantErr: "model is required"},
	{name: "other path with an empty model", ep: openai.EndpointOther,
		body: `{"model":""}`, wantErr: "model is required"},
	{name: "other path with a model of wrong type", ep: openai.EndpointOther,
		body: `{"model":["m"]}`, wantErr: "model must be a string"},
	{name: "audio JSON body", ep: openai.EndpointAudioTranscriptions,
		body: `{"model":"whisper"}`, wantErr: "must be multipart/form-data"},

	// Body errors, the same for every JSON endpoint.
	{name: "responses malformed JSON", ep: openai.EndpointResponses, body: `{"model":"m",`, wantErr: "not valid JSON"},
	{name: "embeddings trailing garbage", ep: openai.EndpointEmbeddings, body: `{"model":"m","input":"x"} x`, wantErr: "not valid JSON"},
	{name: "rerank empty body", ep: openai.EndpointRerank, body: ``, wantErr: "not valid JSON"},
	{name: "score null body", ep: openai.EndpointScore, body: `null`, wantErr: "must be a JSON object"},
	{name: "tokenize array body", ep: openai.EndpointTokenize, body: `[{"model":"m"}]`, wantErr: "must be a JSON object"},
	{name: "other string body", ep: openai.EndpointOther, body: `"m"`, wantErr: "must be a JSON object"},
	{name: "detokenize null body", ep: openai.EndpointDetokenize, body: ` null `, wantErr: "must be a JSON object"},
}

func TestParseRequestFor(t *testing.T) {
	for _, tt := range endpointCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := openai.ParseRequestFor(tt.ep, []byte(tt.body), openai.PromptText)
			if tt.wantErr != "" {
				var reqErr *openai.RequestError
				if !errors.As(err, &reqErr) {
					t.Fatalf("ParseRequestFor() = %+v, %v, want a *RequestError", got, err)
				}
				if !strings.Contains(reqErr.Message, tt.wantErr) {
					t.Errorf("error message = %q, want it to contain %q", reqErr.Message, tt.wantErr)
				}
				return
			}
			want := tt.want
			want.Endpoint, want.PromptLen = tt.ep, len(want.Prompt)
			if err != nil || got != want {
				t.Errorf("ParseRequestFor(%v) = %+v, %v, want %+v", tt.ep, got, err, want)
			}
			want.Prompt = ""
			if got, err := openai.ParseRequestFor(tt.ep, []byte(tt.body), openai.PromptLength); err != nil || got != want {
				t.Errorf("ParseRequestFor(%v, PromptLength) = %+v, %v, want %+v", tt.ep, got, err, want)
			}
		})
	}
}

// TestParseRequestForMatchesParseRequest checks that for the chat and completions
// endpoints ParseRequestFor returns what ParseRequest does for bodies of the path's
// shape.
func TestParseRequestForMatchesParseRequest(t *testing.T) {
	for _, tt := range parseCases {
		want, wantErr := openai.ParseRequest([]byte(tt.body))
		for _, ep := range []openai.Endpoint{openai.EndpointChatCompletions, openai.EndpointCompletions} {
			got, err := openai.ParseRequestFor(ep, []byte(tt.body), openai.PromptText)
			switch {
			case wantErr != nil:
				if err == nil || err.Error() != wantErr.Error() {
					t.Errorf("%s: ParseRequestFor(%v) error = %v, want %v", tt.name, ep, err, wantErr)
				}
			case want.Endpoint == ep:
				if err != nil || got != want {
					t.Errorf("%s: ParseRequestFor(%v) = %+v, %v, want %+v", tt.name, ep, got, err, want)
				}
			default:
				if err == nil {
					t.Errorf("%s: ParseRequestFor(%v) accepted a %v body", tt.name, ep, want.Endpoint)
				}
			}
		}
	}
}

// TestParseRequestForConversationPrefix checks the property prefix-cache routing relies
// on for the responses endpoint: each turn, sent as the earlier input items (outputs
// included) plus a new user message, has a Prompt that extends the previous turn's;
// and the first turn, sent as a plain string input, flattens like a one-item input.
func TestParseRequestForConversationPrefix(t *testing.T) {
	first, err := openai.ParseRequestFor(openai.EndpointResponses,
		[]byte(`{"model":"m","instructions":"Be terse.","input":"q0"}`), openai.PromptText)
	if err != nil {
		t.Fatal(err)
	}
	items := []any{map[string]any{"role": "user", "content": "q0"}}
	previous := ""
	for turn := range 5 {
		body, err := json.Marshal(map[string]any{"model": "m", "instructions": "Be terse.", "input": items})
		if err != nil {
			t.Fatal(err)
		}
		req, err := openai.ParseRequestFor(openai.EndpointResponses, body, openai.PromptText)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if turn == 0 && req.Prompt != first.Prompt {
			t.Fatalf("string input prompt %q differs from the one-item input prompt %q", first.Prompt, req.Prompt)
		}
		if !strings.HasPrefix(req.Prompt, previous) || len(req.Prompt) <= len(previous) {
			t.Fatalf("turn %d prompt %q does not extend turn %d prompt %q", turn, req.Prompt, turn-1, previous)
		}
		previous = req.Prompt
		items = append(items,
			map[string]any{"type": "reasoning", "id": "rs", "summary": []any{}},
			map[string]any{"type": "message", "role": "assistant", "content": []map[string]any{
				{"type": "output_text", "text": strings.Repeat("a", turn+1), "annotations": []any{}}}},
			map[string]any{"role": "user", "content": []map[string]any{
				{"type": "input_text", "text": strings.Repeat("q", turn+1)}}})
	}
}

// FuzzParseRequestFor checks, for every endpoint, that ParseRequestFor never panics,
// fails only with a *RequestError carrying a message, and on success returns valid
// UTF-8, a non-empty model, the endpoint asked for, the prompt's length, the same result
// on a second parse, the same but for the prompt's text in PromptLength mode, and the
// model any other endpoint reads from the same body.
func FuzzParseRequestFor(f *testing.F) {
	for _, tt := range endpointCases {
		f.Add(uint8(tt.ep), []byte(tt.body))
	}
	f.Fuzz(func(t *testing.T, epByte uint8, body []byte) {
		ep := openai.Endpoint(epByte % uint8(openai.EndpointDetokenize+1))
		req, err := openai.ParseRequestFor(ep, body, openai.PromptText)
		if err != nil {
			var reqErr *openai.RequestError
			if !errors.As(err, &reqErr) || reqErr.Message == "" {
				t.Fatalf("error %v (%T) is not a *RequestError with a message", err, err)
			}
			return
		}
		if req.Model == "" || req.MaxTokens < 0 || req.Endpoint != ep || req.PromptLen != len(req.Prompt) {
			t.Fatalf("ParseRequestFor(%v) gave %+v", ep, req)
		}
		if !utf8.ValidString(req.Prompt) || !utf8.ValidString(req.Model) {
			t.Fatalf("ParseRequestFor returned invalid UTF-8: %+v", req)
		}
		if req.Chat && !strings.HasSuffix(req.Prompt, "\n") {
			t.Fatalf("chat prompt %q does not end with a message terminator", req.Prompt)
		}
		if again, err := openai.ParseRequestFor(ep, body, openai.PromptText); err != nil || again != req {
			t.Fatalf("re-parsing gave %+v, %v; first parse gave %+v", again, err, req)
		}
		counted := req
		counted.Prompt = ""
		if got, err := openai.ParseRequestFor(ep, body, openai.PromptLength); err != nil || got != counted {
			t.Fatalf("PromptLength gave %+v, %v; want %+v", got, err, counted)
		}
		// Routing by model must not depend on which parser read the body.
		other, err := openai.ParseRequestFor(openai.EndpointOther, body, openai.PromptText)
		if err != nil || other.Model != req.Model {
			t.Fatalf("EndpointOther read %+v, %v from a body %v read as model %q", other, err, ep, req.Model)
		}
	})
}
