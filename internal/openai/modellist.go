package openai

// List is OpenAI's list envelope, {"object":"list","data":[...]}.
type List[T any] struct {
	Object string `json:"object"`
	Data   []T    `json:"data"`
}

// NewList returns a list of data, never encoding data as null.
func NewList[T any](data []T) List[T] {
	if data == nil {
		data = []T{}
	}
	return List[T]{Object: "list", Data: data}
}

// OwnedBy is the owned_by field of the model objects Switchboard lists.
const OwnedBy = "switchboard"

// Model is an OpenAI model object, with vLLM's parent field naming an adapter's base
// model (null for a base model).
type Model struct {
	ID      string  `json:"id"`
	Object  string  `json:"object"`
	Created int64   `json:"created"`
	OwnedBy string  `json:"owned_by"`
	Parent  *string `json:"parent"`
}

// NewModel returns the model object of name on top of base (equal for a base model),
// created at the Unix time created.
func NewModel(name, base string, created int64) Model {
	m := Model{ID: name, Object: "model", Created: created, OwnedBy: OwnedBy}
	if name != base {
		m.Parent = &base
	}
	return m
}
