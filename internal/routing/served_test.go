package routing_test

import (
	"net/http"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
	"github.com/switchboard-llm/switchboard/internal/routing/sessionaffinity"
)

// TestServedMovesWhatWasLearnt checks that when another endpoint than the chosen one
// served a request (a fallback the data plane tried), the algorithm learns that one: the
// session's next request goes to the endpoint that served it, not to the one chosen.
func TestServedMovesWhatWasLearnt(t *testing.T) {
	f := routingtest.NewFleet("m", 3)
	router := routing.NewRouter(sessionaffinity.New(sessionaffinity.Config{}, routingtest.SeededRandom(1)), routingtest.Options())
	req := routing.Request{Headers: http.Header{"X-Session-Id": {"s"}}}

	first := routingtest.Route(t, router, f.Context(req))
	chosen := first.Pod
	served := f.Pod(0)
	if served == chosen {
		served = f.Pod(1)
	}
	first.Served(served)
	first.Release(0)

	next := routingtest.Route(t, router, f.Context(req))
	defer next.Release(0)
	if next.Pod != served {
		t.Errorf("the session's next request went to %s, want %s, which served the first (chosen: %s)", next.Pod.Key, served.Key, chosen.Key)
	}
}
