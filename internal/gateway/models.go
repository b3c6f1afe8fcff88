package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/switchboard-llm/switchboard/internal/openai"
	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// modelsPath is the OpenAI models API; GET on it, or on modelsPath + "/" + a model, is
// answered by the gateway itself on inference rules, from the cache.
const modelsPath = "/v1/models"

// serveModels answers GET /v1/models and GET /v1/models/{model} on an inference rule with
// the models the rule's backends serve: the base models and adapters of their ready
// engine pods, adapters with their parent. It reports false for any other request.
func (g *Gateway) serveModels(w http.ResponseWriter, r *http.Request, rule *routetable.Rule, o *outcome) bool {
	if r.Method != http.MethodGet {
		return false
	}
	name, one := strings.CutPrefix(r.URL.Path, modelsPath+"/")
	if !one && r.URL.Path != modelsPath {
		return false
	}
	served := g.servedModels(rule)
	var body any
	if one {
		i := slices.IndexFunc(served, func(m openai.Model) bool { return m.ID == name })
		if i < 0 {
			o.fail(w, r, errModelNotFound(name))
			return true
		}
		body = served[i]
	} else {
		body = openai.NewList(served)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	o.status = http.StatusOK
	if err := json.NewEncoder(w).Encode(body); err != nil {
		g.log.V(1).Info("Writing the model list failed", "error", fmt.Sprint(err))
	}
	return true
}

// servedModels returns the models served by the ready engine pods of rule's backends,
// sorted by name.
func (g *Gateway) servedModels(rule *routetable.Rule) []openai.Model {
	bases := map[string]string{} // model name -> base model
	for _, b := range rule.Backends {
		_, pods := g.candidates(b, nil, nil)
		for _, p := range pods.Pods {
			if !p.IsEngine() {
				continue
			}
			bases[p.BaseModel] = p.BaseModel
			for _, a := range p.Adapters {
				bases[a] = p.BaseModel
			}
		}
	}
	out := make([]openai.Model, 0, len(bases))
	for name, base := range bases {
		out = append(out, openai.NewModel(name, base, g.created))
	}
	slices.SortFunc(out, func(a, b openai.Model) int { return strings.Compare(a.ID, b.ID) })
	return out
}
