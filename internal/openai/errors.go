package openai

import (
	"encoding/json"
	"net/http"
)

// errorBody is the OpenAI error envelope.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    *string `json:"code"`
}

// WriteError answers with status and an OpenAI-shaped JSON error body
// {"error":{"message":message,"type":errType,"code":code}}, with Content-Type
// application/json. An empty code is written as null, as OpenAI does for errors without
// a code. Write errors are ignored: they mean the client has gone away.
func WriteError(w http.ResponseWriter, status int, errType, code, message string) {
	detail := errorDetail{Message: message, Type: errType}
	if code != "" {
		detail.Code = &code
	}
	// Marshalling strings into a fixed struct cannot fail.
	data, _ := json.Marshal(errorBody{Error: detail})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
