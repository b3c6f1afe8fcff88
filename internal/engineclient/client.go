package engineclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxResponseBytes bounds the part of an engine answer the client reads.
const maxResponseBytes = 4 << 20

// DefaultTimeout bounds one request of a Client built with a nil *http.Client. Loading an
// adapter can take a while on a real engine, so it is generous.
const DefaultTimeout = 2 * time.Minute

// Errors an engine answer is classified as; test with errors.Is on the error returned by a
// Client method.
var (
	// ErrMaxAdapters means the engine already holds its maximum number of adapters
	// (vLLM --max-loras).
	ErrMaxAdapters = errors.New("engine holds its maximum number of adapters")
	// ErrAlreadyLoaded means an adapter of that name is already loaded (or loading).
	ErrAlreadyLoaded = errors.New("adapter already loaded")
	// ErrNotLoaded means the engine has no adapter of that name to unload.
	ErrNotLoaded = errors.New("adapter not loaded")
	// ErrUnauthorized means the engine rejected the API key (HTTP 401 or 403).
	ErrUnauthorized = errors.New("engine rejected the API key")
)

// Error is a non-success answer of an engine. It matches ErrMaxAdapters, ErrAlreadyLoaded,
// ErrNotLoaded or ErrUnauthorized under errors.Is when the answer means that.
type Error struct {
	// Op is the operation: "list models", "load adapter" or "unload adapter".
	Op string
	// URL is the requested URL.
	URL string
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Type is the OpenAI-style error type, when the engine gave one.
	Type string
	// Message is the engine's error message, or the start of the body when it was not JSON.
	Message string
}

// Error describes the failed operation and the engine's answer.
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s answered %d: %s", e.Op, e.URL, e.StatusCode, e.Message)
}

// Is reports whether the answer means target.
func (e *Error) Is(target error) bool {
	msg := strings.ToLower(e.Message)
	switch target {
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrMaxAdapters:
		// vLLM-compatible engines answer 400 naming the limit, e.g. engine-sim's
		// "Cannot load lora adapter 'x': max_loras=4 adapters are already loaded."
		return e.StatusCode == http.StatusBadRequest &&
			(strings.Contains(msg, "max_loras") || strings.Contains(msg, "max_cpu_loras") ||
				strings.Contains(msg, "maximum number of"))
	case ErrAlreadyLoaded:
		return e.StatusCode == http.StatusBadRequest && strings.Contains(msg, "already been loaded")
	case ErrNotLoaded:
		return e.StatusCode == http.StatusNotFound && e.Op == opUnload
	}
	return false
}

const (
	opModels = "list models"
	opLoad   = "load adapter"
	opUnload = "unload adapter"
)

// Client calls engine admin APIs. It is safe for concurrent use; one Client serves every
// engine, each call naming the engine's base URL (http://<podIP>:<port>).
type Client struct {
	http *http.Client
}

// New returns a Client sending requests with httpClient, or with a client bounded by
// DefaultTimeout when httpClient is nil.
func New(httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: DefaultTimeout}
	}
	return &Client{http: httpClient}
}

// Model is one entry of an engine's GET /v1/models listing (vLLM's model card).
type Model struct {
	// ID is the model name requests use.
	ID string `json:"id"`
	// Parent is the base model of an adapter; empty (null) for a base model.
	Parent string `json:"parent"`
	// Root is the model's origin: the weights of a base model, the path of an adapter.
	Root string `json:"root"`
}

// Models returns the ids of the models the engine at baseURL serves: its base model and
// every loaded adapter, in the engine's order. apiKey, if not empty, is sent as a bearer
// token.
func (c *Client) Models(ctx context.Context, baseURL, apiKey string) ([]string, error) {
	cards, err := c.ModelCards(ctx, baseURL, apiKey)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(cards))
	for _, m := range cards {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// ModelCards is Models with each model's parent and root. A listing without a "data"
// list is an error, not an engine serving nothing.
func (c *Client) ModelCards(ctx context.Context, baseURL, apiKey string) ([]Model, error) {
	url := baseURL + "/v1/models"
	body, err := c.do(ctx, opModels, http.MethodGet, url, apiKey, nil)
	if err != nil {
		return nil, err
	}
	return decodeModelCards(url, body)
}

// ReadModelCards reads resp, the answer to a GET request for url (an engine's /v1/models)
// sent by other means than a Client, and returns the listing as ModelCards does. It reads at most 4 MiB of
// resp.Body and does not close it.
func ReadModelCards(resp *http.Response, url string) ([]Model, error) {
	body, err := readAnswer(opModels, url, resp)
	if err != nil {
		return nil, err
	}
	return decodeModelCards(url, body)
}

// decodeModelCards decodes body, the 2xx answer of a model listing from url.
func decodeModelCards(url string, body []byte) ([]Model, error) {
	var list struct {
		Data *[]Model `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("%s: decode %s: %w", opModels, url, err)
	}
	if list.Data == nil {
		return nil, fmt.Errorf("%s: decode %s: no \"data\" list", opModels, url)
	}
	return *list.Data, nil
}

// LoadAdapter asks the engine at baseURL to load the LoRA adapter name from path. It
// returns when the engine answers; confirm with Models that the adapter is served.
func (c *Client) LoadAdapter(ctx context.Context, baseURL, apiKey, name, path string) error {
	payload, err := json.Marshal(map[string]string{"lora_name": name, "lora_path": path})
	if err != nil {
		return fmt.Errorf("%s: %w", opLoad, err)
	}
	_, err = c.do(ctx, opLoad, http.MethodPost, baseURL+"/v1/load_lora_adapter", apiKey, payload)
	return err
}

// UnloadAdapter asks the engine at baseURL to unload the LoRA adapter name. An adapter the
// engine does not hold yields an error matching ErrNotLoaded.
func (c *Client) UnloadAdapter(ctx context.Context, baseURL, apiKey, name string) error {
	payload, err := json.Marshal(map[string]string{"lora_name": name})
	if err != nil {
		return fmt.Errorf("%s: %w", opUnload, err)
	}
	_, err = c.do(ctx, opUnload, http.MethodPost, baseURL+"/v1/unload_lora_adapter", apiKey, payload)
	return err
}

// do sends one request and returns the body of a 2xx answer, or an *Error for any other
// status.
func (c *Client) do(ctx context.Context, op, method, url, apiKey string, payload []byte) ([]byte, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	return readAnswer(op, url, resp)
}

// readAnswer returns the body of resp, the answer to a request for url, when its status
// is 2xx, or an *Error for any other status. It reads at most maxResponseBytes of the body.
func readAnswer(op, url string, resp *http.Response) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("%s: read %s: %w", op, url, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return data, nil
	}
	return nil, newError(op, url, resp.StatusCode, data)
}

// newError builds the Error of a non-2xx answer from its body: an OpenAI-shaped
// {"error":{"message","type"}}, a FastAPI {"detail"}, a {"error":"..."} string or plain text.
func newError(op, url string, status int, body []byte) *Error {
	e := &Error{Op: op, URL: url, StatusCode: status}
	var shaped struct {
		Error  json.RawMessage `json:"error"`
		Detail any             `json:"detail"`
	}
	if json.Unmarshal(body, &shaped) == nil {
		var info struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		}
		var s string
		switch {
		case json.Unmarshal(shaped.Error, &info) == nil && info.Message != "":
			e.Message, e.Type = info.Message, info.Type
		case json.Unmarshal(shaped.Error, &s) == nil && s != "":
			e.Message = s
		case shaped.Detail != nil:
			e.Message = fmt.Sprint(shaped.Detail)
		}
	}
	if e.Message == "" {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 512 {
			msg = msg[:512]
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
		e.Message = msg
	}
	return e
}
