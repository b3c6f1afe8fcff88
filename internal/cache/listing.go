package cache

import (
	"errors"
	"fmt"
	"time"

	"github.com/switchboard-llm/switchboard/internal/engineclient"
)

// ListedModel is one entry of an engine's GET /v1/models listing (vLLM's model card).
type ListedModel = engineclient.Model

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

// listModels fetches the GET /v1/models listing of the engine on ec.
func (w *scrapeWorker) listModels(ec *engineConn) ([]ListedModel, error) {
	resp, err := w.exchange(ec, ec.modelsRequest)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	defer w.release(ec, resp)
	models, err := engineclient.ReadModelCards(resp, "http://"+ec.address+"/v1/models")
	if errors.Is(err, engineclient.ErrUnauthorized) {
		return nil, fmt.Errorf("list models: %w (%v)", errUnauthorized, err)
	}
	return models, err
}
