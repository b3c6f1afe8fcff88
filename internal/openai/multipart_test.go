package openai_test

import (
	"bytes"
	"errors"
	"mime"
	"mime/multipart"
	"net/textproto"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-llm/switchboard/internal/openai"
)

// formBuilder builds a multipart/form-data body:
// form().field("model", "whisper").file("file", "a.wav", audio).build().
type formBuilder struct {
	buf bytes.Buffer
	w   *multipart.Writer
}

func form() *formBuilder {
	f := &formBuilder{}
	f.w = multipart.NewWriter(&f.buf)
	return f
}

func (f *formBuilder) field(name, value string) *formBuilder {
	if err := f.w.WriteField(name, value); err != nil {
		panic(err)
	}
	return f
}

func (f *formBuilder) file(name, filename string, data []byte) *formBuilder {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="`+name+`"; filename="`+filename+`"`)
	h.Set("Content-Type", "application/octet-stream")
	part, err := f.w.CreatePart(h)
	if err != nil {
		panic(err)
	}
	_, _ = part.Write(data)
	return f
}

// build closes the body and returns its Content-Type and bytes.
func (f *formBuilder) build() (string, []byte) {
	if err := f.w.Close(); err != nil {
		panic(err)
	}
	return f.w.FormDataContentType(), f.buf.Bytes()
}

// audio is a fake upload whose bytes include what a naive scan might take for fields.
var audio = []byte("RIFF\x00\x00WAVE\r\n--not-the-boundary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nevil\r\n\xff\xfe")

// multipartCases are the table of TestParseMultipart and the seed corpus of
// FuzzParseMultipart.
var multipartCases = []struct {
	name        string
	contentType string // when empty, the builder's
	form        *formBuilder
	rawBody     string // used when form is nil
	want        openai.Request
	wantErr     string
}{
	{name: "model before the file",
		form: form().field("model", "whisper-large").field("language", "en").file("file", "a.wav", audio),
		want: openai.Request{Model: "whisper-large"}},
	{name: "model, stream and prompt after the file",
		form: form().file("file", "a.wav", audio).field("model", "whisper").field("stream", "True").field("prompt", "Kubernetes, vLLM"),
		want: openai.Request{Model: "whisper", Stream: true, Prompt: "Kubernetes, vLLM"}},
	{name: "stream false and empty prompt",
		form: form().field("model", "w").field("stream", " false ").field("prompt", "").file("file", "a.wav", audio),
		want: openai.Request{Model: "w"}},
	{name: "stream as 1", form: form().field("model", "w").field("stream", "1"),
		want: openai.Request{Model: "w", Stream: true}},
	{name: "empty stream is false", form: form().field("model", "w").field("stream", ""),
		want: openai.Request{Model: "w"}},
	{name: "content type with a quoted boundary and charset",
		contentType: `Multipart/Form-Data; charset=utf-8; boundary="b b"`,
		rawBody:     "--b b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b b--\r\n",
		want:        openai.Request{Model: "m"}},
	{name: "missing model", form: form().field("prompt", "p").file("file", "a.wav", audio), wantErr: "model is required"},
	{name: "empty model", form: form().field("model", "").file("file", "a.wav", audio), wantErr: "model is required"},
	{name: "empty form", form: form(), wantErr: "model is required"},
	{name: "model as a file", form: form().file("model", "m.txt", []byte("whisper")), wantErr: "model must be a form field, not a file"},
	{name: "repeated model", form: form().field("model", "a").file("file", "a.wav", audio).field("model", "b"), wantErr: "model must not be repeated"},
	{name: "repeated stream", form: form().field("model", "a").field("stream", "true").field("stream", "true"), wantErr: "stream must not be repeated"},
	{name: "stream not a boolean", form: form().field("model", "a").field("stream", "sometimes"), wantErr: "stream must be a boolean"},
	{name: "model not UTF-8", form: form().field("model", "w\xff"), wantErr: "model must be UTF-8 text"},
	{name: "prompt not UTF-8", form: form().field("model", "w").field("prompt", "\xc3"), wantErr: "prompt must be UTF-8 text"},
	{name: "JSON content type", contentType: "application/json", rawBody: `{"model":"whisper"}`,
		wantErr: "Content-Type must be multipart/form-data"},
	{name: "no content type", contentType: " ", rawBody: `x`, wantErr: "Content-Type must be multipart/form-data"},
	{name: "multipart without a boundary", contentType: "multipart/form-data", rawBody: `x`,
		wantErr: "Content-Type must be multipart/form-data with a boundary"},
	{name: "other multipart type", contentType: "multipart/mixed; boundary=b",
		rawBody: "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b--\r\n", wantErr: "Content-Type must be multipart/form-data"},
	{name: "wrong boundary", contentType: "multipart/form-data; boundary=other",
		rawBody: "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b--\r\n", wantErr: "not valid multipart/form-data"},
	{name: "truncated body", contentType: "multipart/form-data; boundary=b",
		rawBody: "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nRIFF",
		wantErr: "not valid multipart/form-data"},
	{name: "empty body", contentType: "multipart/form-data; boundary=b", rawBody: "", wantErr: "not valid multipart/form-data"},
}

// multipartBody returns a case's Content-Type and body, building its form.
func multipartBody(contentType string, f *formBuilder, raw string) (string, []byte) {
	if f == nil {
		return contentType, []byte(raw)
	}
	ct, body := f.build()
	if contentType != "" {
		ct = contentType
	}
	return ct, body
}

// builtMultipartCases are the Content-Types and bodies of multipartCases, in order;
// each form can be built only once.
var builtMultipartCases = func() (out []struct {
	contentType string
	body        []byte
}) {
	for _, tt := range multipartCases {
		ct, body := multipartBody(tt.contentType, tt.form, tt.rawBody)
		out = append(out, struct {
			contentType string
			body        []byte
		}{ct, body})
	}
	return out
}()

func TestParseMultipart(t *testing.T) {
	for i, tt := range multipartCases {
		t.Run(tt.name, func(t *testing.T) {
			ct, body := builtMultipartCases[i].contentType, builtMultipartCases[i].body
			original := bytes.Clone(body)
			got, err := openai.ParseMultipart(openai.EndpointAudioTranscriptions, ct, body)
			if !bytes.Equal(body, original) {
				t.Fatal("ParseMultipart modified the body")
			}
			if tt.wantErr != "" {
				var reqErr *openai.RequestError
				if !errors.As(err, &reqErr) {
					t.Fatalf("ParseMultipart() = %+v, %v, want a *RequestError", got, err)
				}
				if !strings.Contains(reqErr.Message, tt.wantErr) {
					t.Errorf("error message = %q, want it to contain %q", reqErr.Message, tt.wantErr)
				}
				return
			}
			want := tt.want
			want.Endpoint, want.PromptLen = openai.EndpointAudioTranscriptions, len(want.Prompt)
			if err != nil || got != want {
				t.Errorf("ParseMultipart() = %+v, %v, want %+v", got, err, want)
			}
		})
	}
}

// FuzzParseMultipart checks ParseMultipart against mime/multipart's ReadForm: when
// ParseMultipart accepts a body, ReadForm reads the same model, stream and prompt
// values from it, each at most once and none of them a file.
func FuzzParseMultipart(f *testing.F) {
	for _, c := range builtMultipartCases {
		f.Add(c.contentType, c.body)
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		req, err := openai.ParseMultipart(openai.EndpointAudioTranslations, contentType, body)
		if err != nil {
			var reqErr *openai.RequestError
			if !errors.As(err, &reqErr) || reqErr.Message == "" {
				t.Fatalf("error %v (%T) is not a *RequestError with a message", err, err)
			}
			return
		}
		if req.Model == "" || req.Endpoint != openai.EndpointAudioTranslations || req.MaxTokens != 0 {
			t.Fatalf("ParseMultipart gave %+v", req)
		}
		if !utf8.ValidString(req.Prompt) || !utf8.ValidString(req.Model) {
			t.Fatalf("ParseMultipart returned invalid UTF-8: %+v", req)
		}
		ref, err := referenceForm(contentType, body)
		if err != nil {
			t.Fatalf("ParseMultipart accepted %q (%+v) but ReadForm failed: %v", body, req, err)
		}
		if len(ref.Value["model"]) != 1 || ref.Value["model"][0] != req.Model || len(ref.File["model"]) != 0 {
			t.Fatalf("ReadForm read model %q (files %d), ParseMultipart %q", ref.Value["model"], len(ref.File["model"]), req.Model)
		}
		if p := ref.Value["prompt"]; len(p) > 1 || (len(p) == 1 && p[0] != req.Prompt) || (len(p) == 0 && req.Prompt != "") {
			t.Fatalf("ReadForm read prompt %q, ParseMultipart %q", p, req.Prompt)
		}
		if s := ref.Value["stream"]; len(s) > 1 || (len(s) == 0 && req.Stream) {
			t.Fatalf("ReadForm read stream %q, ParseMultipart %v", s, req.Stream)
		}
	})
}

// referenceForm reads body with mime/multipart's ReadForm, the reference for what
// the form holds.
func referenceForm(contentType string, body []byte) (*multipart.Form, error) {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, err
	}
	form, err := multipart.NewReader(bytes.NewReader(body), params["boundary"]).ReadForm(int64(len(body)) + 1<<20)
	if err != nil {
		return nil, err
	}
	return form, form.RemoveAll()
}

func BenchmarkParseMultipart(b *testing.B) {
	upload := bytes.Repeat([]byte("RIFF audio \r\n-- bytes "), (10<<20)/23) // about 10 MB
	ct, body := form().file("file", "speech.wav", upload).field("model", "whisper-large-v3").
		field("stream", "true").field("prompt", "Switchboard, vLLM").build()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openai.ParseMultipart(openai.EndpointAudioTranscriptions, ct, body); err != nil {
			b.Fatal(err)
		}
	}
}
