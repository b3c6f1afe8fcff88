package routingtest

import (
	"sync"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// Options returns router options that reserve on the pods' own in-flight counters, as
// the gateway does, and treat metrics older than StaleAfter as unknown; no fallback, no
// in-flight cap.
func Options() routing.Options {
	return routing.Options{Reserver: cache.Tracker{}, StaleAfter: StaleAfter}
}

// Route routes rc through router and returns the reserved target, stopping t at once if
// rc was not routed. Releasing the target is the caller's job.
func Route(t testing.TB, router routing.Router, rc *routing.RoutingContext) *routing.Target {
	t.Helper()
	router.Route(rc)
	target, err := rc.TryResult()
	if err != nil {
		t.Fatalf("route: %v", err)
	}
	return target
}

// RouteBurst routes n requests for f's model through router at once: n goroutines each
// build a routing context, wait until all have started, then route. It fails t for
// every request not routed. The chosen endpoints stay reserved, so that the caller can
// check how the burst spread.
func RouteBurst(t testing.TB, router routing.Router, f *Fleet, n int) {
	t.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			rc := f.Context(routing.Request{})
			<-start
			router.Route(rc)
			if _, err := rc.TryResult(); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
}

// CheckBurstSpreadsEvenly routes a burst of 100 requests per pod of f through router
// (RouteBurst) and fails t unless every pod ends with 100 ± 1 of them in flight: what a
// router whose choice and reservation are one step does with idle pods its algorithm
// rates alike.
func CheckBurstSpreadsEvenly(t testing.TB, router routing.Router, f *Fleet) {
	t.Helper()
	pods := f.Pods()
	RouteBurst(t, router, f, 100*len(pods))
	for i, p := range pods {
		if n := p.Load().InFlight(); n < 99 || n > 101 {
			t.Errorf("pod %d has %d in flight, want 100 ± 1", i, n)
		}
	}
}
