package enginesim

import (
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
)

// maxAudioBytes bounds an audio request's body, as vLLM bounds audio files to 25 MB.
const maxAudioBytes = 25 << 20

// audioTask is what an audio endpoint does with the audio.
type audioTask struct {
	name   string // in the transcript: "transcription" or "translation"
	prompt string // the decoder prompt the engine prefills
	usage  bool   // whether the JSON answer reports the audio duration, as transcriptions do
}

var (
	transcription = audioTask{name: "transcription", prompt: "<|startoftranscript|><|transcribe|>", usage: true}
	translation   = audioTask{name: "translation", prompt: "<|startoftranscript|><|translate|>"}
)

// audioBytesPerSecond is the rate of 16 kHz 16-bit mono PCM, used to report a duration.
const audioBytesPerSecond = 32000

// audioForm holds the multipart fields of an audio request the engine uses.
type audioForm struct {
	model, responseFormat string
	fileBytes             int64
	hasFile               bool
}

// readAudioForm reads a multipart/form-data body part by part, counting the file's bytes
// without keeping them.
func readAudioForm(w http.ResponseWriter, r *http.Request) (audioForm, error) {
	var f audioForm
	r.Body = http.MaxBytesReader(w, r.Body, maxAudioBytes)
	mr, err := r.MultipartReader()
	if err != nil {
		return f, errors.New("the body must be multipart/form-data")
	}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return f, err
		}
		switch p.FormName() {
		case "file":
			f.hasFile = true
			f.fileBytes, err = io.Copy(io.Discard, p)
		case "model":
			f.model, err = formValue(p)
		case "response_format":
			f.responseFormat, err = formValue(p)
		default:
			_, err = io.Copy(io.Discard, p)
		}
		if err != nil {
			return f, err
		}
	}
	if !f.hasFile {
		return f, errors.New("the file field is required")
	}
	return f, nil
}

// formValue reads a short form field.
func formValue(p *multipart.Part) (string, error) {
	var b strings.Builder
	_, err := io.Copy(&b, io.LimitReader(p, 4096))
	return b.String(), err
}

// handleAudio serves POST /v1/audio/transcriptions and /v1/audio/translations: a
// deterministic transcript naming the audio's size, generated as that many tokens after the
// task's decoder prompt. response_format is json (the default) or text.
func (e *Engine) handleAudio(task audioTask) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		form, err := readAudioForm(w, r)
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			badRequest(w, "Maximum file size exceeded.")
			return
		case err != nil:
			badRequest(w, "malformed form body: "+err.Error())
			return
		}
		adapter, ok := e.requireModel(w, form.model)
		switch {
		case !ok:
			return
		case form.responseFormat != "" && form.responseFormat != "json" && form.responseFormat != "text":
			badRequest(w, "Currently only support response_format `text` or `json`")
			return
		case e.injectedFailure(w):
			return
		}
		text := fmt.Sprintf("Simulated %s of %d bytes of audio.", task.name, form.fileBytes)
		g := generation{prompt: task.prompt, maxTokens: CountTokens(text), adapter: adapter}
		if _, _, ok := e.generateText(r.Context(), g); !ok {
			return
		}
		if form.responseFormat == "text" {
			writeText(w, text)
			return
		}
		body := map[string]any{"text": text}
		if task.usage {
			seconds := (form.fileBytes + audioBytesPerSecond - 1) / audioBytesPerSecond
			body["usage"] = map[string]any{"type": "duration", "seconds": seconds}
		}
		writeJSON(w, http.StatusOK, body)
	}
}
