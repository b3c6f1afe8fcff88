package routing_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/cache"
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
	select {
	case <-rc.Settled(): // asked for only after settling: closed at once
	default:
		t.Error("Settled() of a settled context is not closed")
	}
	if got, err := rc.Wait(); err != nil || got != target {
		t.Errorf("Wait() = %v, %v; want the first target", got, err)
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
	type outcome struct {
		target *routing.Target
		err    error
	}
	outcomes := make(chan outcome, waiters)
	var wg sync.WaitGroup
	target := reserveTarget(t, fleet, 0)
	started := make(chan struct{}, waiters)
	for range waiters {
		wg.Go(func() {
			started <- struct{}{}
			tg, err := rc.Wait()
			outcomes <- outcome{tg, err}
		})
	}
	for range waiters {
		<-started
	}
	// Settle from several goroutines at once: exactly one wins.
	var wins atomic.Int64
	var settlers sync.WaitGroup
	loser := errors.New("loser")
	for i := range 8 {
		settlers.Go(func() {
			var won bool
			if i == 0 {
				won = rc.Resolve(target)
			} else {
				won = rc.Reject(loser)
			}
			if won {
				wins.Add(1)
			}
		})
	}
	settlers.Wait()
	wg.Wait()
	close(outcomes)
	if wins.Load() != 1 {
		t.Fatalf("%d settlements won, want 1", wins.Load())
	}
	// Whichever settlement won, every waiter saw exactly that one.
	final, finalErr := rc.TryResult()
	if (final == nil) == (finalErr == nil) || (finalErr != nil && !errors.Is(finalErr, loser)) {
		t.Fatalf("TryResult() = %v, %v; want the target or the losers' error", final, finalErr)
	}
	n := 0
	for o := range outcomes {
		n++
		if o.target != final || o.err != finalErr {
			t.Errorf("a waiter saw %v, %v; the context settled with %v, %v", o.target, o.err, final, finalErr)
		}
	}
	if n != waiters {
		t.Errorf("%d of %d waiters returned", n, waiters)
	}
}

func TestRoutingContextWaitRejectsOnCancel(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	ctx, cancel := context.WithCancel(context.Background())
	m, _ := fleet.Cache.Model("llama")
	rc := routing.NewRoutingContext(ctx, routing.Request{Model: "llama"}, m, cache.NewPodSet(fleet.Pods()))
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

// TestRoutingContextCachesPromptHashes checks that hashes cached under a key are returned
// for that key only, and that Init forgets them while keeping their memory to append to.
func TestRoutingContextCachesPromptHashes(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	rc := fleet.Context(routing.Request{Prompt: "p"})
	if got, ok := rc.PromptHashes(16); ok || len(got) != 0 {
		t.Fatalf("fresh context: PromptHashes = %v, %v; want nothing cached", got, ok)
	}
	rc.SetPromptHashes(16, []uint64{1, 2, 3})
	if got, ok := rc.PromptHashes(16); !ok || len(got) != 3 || got[2] != 3 {
		t.Errorf("PromptHashes(16) = %v, %v; want the cached [1 2 3]", got, ok)
	}
	if got, ok := rc.PromptHashes(32); ok || len(got) != 0 {
		t.Errorf("PromptHashes(32) = %v, %v; want nothing cached under another key", got, ok)
	}
	fleet.InitContext(rc, routing.Request{Prompt: "q"})
	if got, ok := rc.PromptHashes(16); ok || len(got) != 0 || cap(got) < 3 {
		t.Errorf("after Init: PromptHashes(16) = %v (cap %d), %v; want nothing cached, the memory kept", got, cap(got), ok)
	}
}
