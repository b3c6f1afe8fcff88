package enginesim

import (
	"bytes"
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
)

func TestAudioWithSDK(t *testing.T) {
	te := startEngine(t, fastConfig())
	audio := bytes.Repeat([]byte{0x7f}, 100_000)
	tr, err := te.client.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{
		File:  openai.File(bytes.NewReader(audio), "speech.wav", "audio/wav"),
		Model: "llama-3-8b",
	})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Text != "Simulated transcription of 100000 bytes of audio." || tr.Usage.Seconds != 4 {
		t.Fatalf("transcription %+v", tr)
	}
	tl, err := te.client.Audio.Translations.New(context.Background(), openai.AudioTranslationNewParams{
		File:  openai.File(bytes.NewReader(audio[:10]), "speech.wav", "audio/wav"),
		Model: "llama-3-8b",
	})
	if err != nil {
		t.Fatal(err)
	}
	if tl.Text != "Simulated translation of 10 bytes of audio." {
		t.Fatalf("translation %+v", tl)
	}
	fams := te.metrics(t)
	if got, want := value(t, fams, "vllm:generation_tokens_total"), float64(CountTokens(tr.Text)+CountTokens(tl.Text)); got != want {
		t.Fatalf("generation tokens %v, want %v, the transcripts' tokens", got, want)
	}
}

func TestAudioForm(t *testing.T) {
	te := startEngine(t, fastConfig())
	form := func(fields map[string]string, file []byte) request {
		fields["model"] = "llama-3-8b"
		return formBody(t, fields, file)
	}
	runAPICases(t, te, []apiCase{
		{name: "text", path: "/v1/audio/transcriptions", body: form(map[string]string{"response_format": "text"}, []byte("abc")), status: 200,
			check: func(t *testing.T, body string) {
				if body != "Simulated transcription of 3 bytes of audio." {
					t.Fatalf("plain-text body %q", body)
				}
			}},
		{name: "json", path: "/v1/audio/translations", body: form(map[string]string{"response_format": "json", "language": "de"}, []byte{}), status: 200,
			contains: `{"text":"Simulated translation of 0 bytes of audio."}`},
		{name: "srt", path: "/v1/audio/transcriptions", body: form(map[string]string{"response_format": "srt"}, []byte("abc")), status: 400, contains: "response_format `text` or `json`"},
		{name: "no file", path: "/v1/audio/transcriptions", body: form(map[string]string{}, nil), status: 400, contains: "the file field is required"},
		{name: "too large", path: "/v1/audio/transcriptions", body: form(map[string]string{}, make([]byte, maxAudioBytes)), status: 400, contains: "Maximum file size exceeded."},
		{name: "not multipart", path: "/v1/audio/transcriptions", body: `{"model":"llama-3-8b"}`, status: 400, contains: "multipart/form-data"},
		{name: "truncated", path: "/v1/audio/transcriptions", status: 400, contains: "malformed form body", body: request{
			"multipart/form-data; boundary=x", []byte("--x\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc"),
		}},
	})
}
