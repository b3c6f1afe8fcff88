package openai_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/openai"
)

func TestWriteError(t *testing.T) {
	tests := []struct {
		name     string
		code     string
		wantCode any
	}{
		{name: "with code", code: "model_not_found", wantCode: "model_not_found"},
		{name: "without code", code: "", wantCode: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			openai.WriteError(rec, http.StatusNotFound, "invalid_request_error", tt.code, `model "x" <not> found`)

			if rec.Code != http.StatusNotFound {
				t.Errorf("status = %d, want %d", rec.Code, http.StatusNotFound)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			var got map[string]map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("body %q is not JSON: %v", rec.Body, err)
			}
			want := map[string]any{"message": `model "x" <not> found`, "type": "invalid_request_error", "code": tt.wantCode}
			if len(got) != 1 || len(got["error"]) != len(want) {
				t.Fatalf("body = %v, want exactly {\"error\": %v}", got, want)
			}
			for k, v := range want {
				if got["error"][k] != v {
					t.Errorf("error.%s = %#v, want %#v", k, got["error"][k], v)
				}
			}
		})
	}
}
