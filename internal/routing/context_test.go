package routing_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

func TestRoutingContextSettlesOnce(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 2)
	rc := fleet.Context(routing.Request{})
	if _, err := rc.TryResult(); !errors.Is(err, routing.ErrPending) {
		t.Fatalf("fresh context: TryResult() error = %v, want ErrPending", err)
	}
	target := reserveTarget(t, fleet, 0)
	if !rc.Resolve(target) {
		t.Fatal("first Resolve lost")
	}
	if rc.Resolve(reserveTarget(t, fleet, 1)) || rc.Reject(errors.New("late")) {
		t.Error("a second settlement won")
	}
	got, err := rc.TryResult()
	if err != nil || got != target {
		t.Errorf("TryResult() = %v, %v; want the first target", got, err)
	}
}

// reserveTarget routes a fresh request to pod i of fleet and returns its target.
func reserveTarget(t *testing.T, fleet *routingtest.Fleet, i int) *routing.Target {
	t.Helper()
	rc := fleet.Context(routing.Request{})
	routing.NewRouter(fixedPicker(i), routing.Options{Reserver: cacheTracker, StaleAfter: routingtest.StaleAfter}).Route(rc)
	target, err := rc.TryResult()
	if err != nil {
		t.Fatal(err)
	}
	return target
}

func TestRoutingContextManyWaitersLateResolution(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	rc := fleet.Context(routing.Request{})
	const waiters = 64
	var wg sync.WaitGroup
	var got atomic.Int64
	target := reserveTarget(t, fleet, 0)
	started := make(chan struct{}, waiters)
	for range waiters {
		wg.Go(func() {
			started <- struct{}{}
			if tg, err := rc.Wait(); err == nil && tg == target {
				got.Add(1)
			}
		})
	}
	for range waiters {
		<-started
	}
	// Settle from several goroutines at once: exactly one wins.
	var wins atomic.Int64
	var settlers sync.WaitGroup
	for i := range 8 {
		settlers.Go(func() {
			var won bool
			if i == 0 {
				won = rc.Resolve(target)
			} else {
				won = rc.Reject(errors.New("loser"))
			}
			if won {
				wins.Add(1)
			}
		})
	}
	settlers.Wait()
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d settlements won, want 1", wins.Load())
	}
	if _, err := rc.TryResult(); err == nil && got.Load() != waiters {
		t.Errorf("%d of %d waiters saw the resolution", got.Load(), waiters)
	}
}

func TestRoutingContextWaitRejectsOnCancel(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	ctx, cancel := context.WithCancel(context.Background())
	m, _ := fleet.Cache.Model("llama")
	rc := routing.NewRoutingContext(ctx, routing.Request{Model: "llama"}, m, fleet.Pods())
	done := make(chan error)
	go func() {
		_, err := rc.Wait()
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait() error = %v, want context.Canceled", err)
	}
	if rc.Resolve(reserveTarget(t, fleet, 0)) {
		t.Error("Resolve after cancellation won")
	}
	if _, err := rc.TryResult(); !errors.Is(err, context.Canceled) {
		t.Errorf("TryResult() error = %v, want context.Canceled", err)
	}
}

func TestTargetReleaseIdempotent(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	target := reserveTarget(t, fleet, 0)
	if n := fleet.Pod(0).Load().InFlight(); n != 1 {
		t.Fatalf("in flight after routing = %d, want 1", n)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { target.Release(5) })
	}
	wg.Wait()
	if n, out := fleet.Pod(0).Load().InFlight(), fleet.Pod(0).Load().TokensOut(); n != 0 || out != 5 {
		t.Errorf("after 16 releases: in flight %d, tokens out %d; want 0 and 5", n, out)
	}
}
