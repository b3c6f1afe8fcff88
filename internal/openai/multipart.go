package openai

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"slices"
	"strings"
	"unicode/utf8"
)

// ParseMultipart reads a multipart/form-data body, that of an audio transcription or
// translation request, and returns what routing needs, with Endpoint set to ep:
// Model from the model form field, Stream from stream ("true", "1", "yes", "on", "t",
// "y" or their false counterparts, ignoring case; empty or absent is false) and
// Prompt from prompt, the optional text that guides the transcription. MaxTokens is 0.
//
// body is the whole request body, already in memory: ParseMultipart scans it in
// place, reads only those three text fields and skips every other part, file parts
// included, without copying it, so the gateway can forward the same bytes unchanged
// and never buffers the upload twice.
//
// Every error it returns is a *RequestError, to be answered with 400: contentType is
// not multipart/form-data with a boundary, the body is not valid multipart, model is
// missing or empty, one of the three fields is a file, is repeated (the gateway and the
// engine might read different copies) or is not UTF-8 text, or stream is not a boolean.
func ParseMultipart(ep Endpoint, contentType string, body []byte) (Request, error) {
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil || mediaType != "multipart/form-data" || params["boundary"] == "" {
		return Request{}, &RequestError{Message: "Content-Type must be multipart/form-data with a boundary", Err: err}
	}
	var (
		fields = [...]string{"model", "stream", "prompt"}
		values [len(fields)]string
		seen   [len(fields)]bool
	)
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		// NextPart discards what is left of the previous part without copying it out.
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Request{}, &RequestError{Message: "request body is not valid multipart/form-data: " + err.Error(), Err: err}
		}
		i := slices.Index(fields[:], part.FormName())
		if i < 0 {
			continue
		}
		switch {
		case part.FileName() != "":
			return Request{}, badRequest("%s must be a form field, not a file", fields[i])
		case seen[i]:
			return Request{}, badRequest("%s must not be repeated", fields[i])
		}
		seen[i] = true
		text, err := io.ReadAll(part)
		if err != nil {
			return Request{}, &RequestError{Message: "request body is not valid multipart/form-data: " + err.Error(), Err: err}
		}
		if !utf8.Valid(text) {
			return Request{}, badRequest("%s must be UTF-8 text", fields[i])
		}
		values[i] = string(text)
	}
	model, stream, prompt := values[0], values[1], values[2]
	if model == "" {
		return Request{}, badRequest("model is required")
	}
	req := Request{Model: model, Prompt: prompt, PromptLen: len(prompt), Endpoint: ep}
	switch strings.ToLower(strings.TrimSpace(stream)) {
	case "", "false", "0", "no", "off", "f", "n":
	case "true", "1", "yes", "on", "t", "y":
		req.Stream = true
	default:
		return Request{}, badRequest("stream must be a boolean")
	}
	return req, nil
}
