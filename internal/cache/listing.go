package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ListedModel is one entry of an engine's GET /v1/models listing (vLLM's model card).
type ListedModel struct {
	// ID is the model name requests use.
	ID string `json:"id"`
	// Parent is the base model of an adapter; empty (null) for a base model.
	Parent string `json:"parent"`
	// Root is the model's origin: the weights of a base model, the path of an adapter.
	Root string `json:"root"`
}

// modelListing is one successful listing of an engine. It is never modified once
// recorded.
type modelListing struct {
	// requestedAt is when the listing request was sent; anything the engine did before
	// then is reflected in it.
	requestedAt time.Time
	models      []ListedModel
}

// adapters returns the ids of the listed adapters on top of base: entries other than base
// whose parent is base or the root of the listed base entry. Anything else, notably an
// adapter of another base model, is ignored.
func (l *modelListing) adapters(base string) []string {
	var baseRoot string
	for _, m := range l.models {
		if m.ID == base {
			baseRoot = m.Root
		}
	}
	var names []string
	for _, m := range l.models {
		if m.ID == "" || m.ID == base || m.Parent == "" {
			continue
		}
		if m.Parent == base || (baseRoot != "" && m.Parent == baseRoot) {
			names = append(names, m.ID)
		}
	}
	return names
}

// errUnauthorized fails a listing the engine refuses without credentials.
var errUnauthorized = errors.New("engine requires credentials")

// listModels fetches and decodes the GET /v1/models listing of p's engine.
func (s *Scraper) listModels(ctx context.Context, p *Pod) ([]ListedModel, error) {
	var list struct {
		Data *[]ListedModel `json:"data"`
	}
	err := s.fetch(ctx, p, "/v1/models", "application/json", func(body io.Reader) error {
		if err := json.NewDecoder(body).Decode(&list); err != nil {
			return err
		}
		if list.Data == nil {
			return errors.New(`no "data" list`)
		}
		return nil
	})
	var st *statusError
	if errors.As(err, &st) && (st.code == http.StatusUnauthorized || st.code == http.StatusForbidden) {
		return nil, fmt.Errorf("list models: %w (%s)", errUnauthorized, st.status)
	}
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	return *list.Data, nil
}
