package routing_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// newQueue returns a queue router over leastInFlight with one request in flight per
// endpoint and at most maxQueued waiting.
func newQueue(maxQueued int) routing.Router {
	return routing.NewQueue(leastInFlight{},
		routing.Options{Reserver: cacheTracker, StaleAfter: routingtest.StaleAfter, MaxInFlight: 1},
		cacheTracker, routing.QueueOptions{MaxQueued: maxQueued})
}

// route routes a request with ctx through r and returns its context.
func route(ctx context.Context, r routing.Router, fleet *routingtest.Fleet) *routing.RoutingContext {
	m, _ := fleet.Cache.Model(fleet.Model)
	rc := routing.NewRoutingContext(ctx, routing.Request{Model: fleet.Model}, m, cache.NewPodSet(fleet.Pods()))
	r.Route(rc)
	return rc
}

// waiting returns the model's count of queued requests.
func waiting(fleet *routingtest.Fleet) int64 {
	m, _ := fleet.Cache.Model(fleet.Model)
	return m.Load().Waiting()
}

func TestQueueServesInOrderAsCapacityFrees(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 2)
	q := newQueue(10)
	ctx := context.Background()
	first, second := route(ctx, q, fleet), route(ctx, q, fleet)
	queued := []*routing.RoutingContext{route(ctx, q, fleet), route(ctx, q, fleet), route(ctx, q, fleet)}
	for _, rc := range queued {
		if _, err := rc.TryResult(); !errors.Is(err, routing.ErrPending) {
			t.Fatalf("request beyond capacity settled with %v, want it pending", err)
		}
	}
	if n := waiting(fleet); n != 3 {
		t.Fatalf("waiting = %d, want 3", n)
	}

	t1, err := first.TryResult()
	if err != nil {
		t.Fatal(err)
	}
	t1.Release(0)
	got, err := queued[0].TryResult()
	if err != nil {
		t.Fatalf("head of the queue after a release: %v", err)
	}
	if got.Pod != t1.Pod {
		t.Errorf("head routed to %s, want the freed %s", got.Pod.Key, t1.Pod.Key)
	}
	if _, err := queued[1].TryResult(); !errors.Is(err, routing.ErrPending) {
		t.Errorf("second in line settled with %v before capacity freed", err)
	}
	if n := waiting(fleet); n != 2 {
		t.Errorf("waiting = %d, want 2", n)
	}

	t2, _ := second.TryResult()
	t2.Release(0)
	got.Release(0)
	for i, rc := range queued[1:] {
		tg, err := rc.TryResult()
		if err != nil {
			t.Fatalf("queued request %d: %v", i+1, err)
		}
		defer tg.Release(0)
	}
	if n := waiting(fleet); n != 0 {
		t.Errorf("waiting = %d, want 0", n)
	}
}

func TestQueueFullRejects(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	q := newQueue(2)
	ctx := context.Background()
	route(ctx, q, fleet)
	route(ctx, q, fleet)
	route(ctx, q, fleet)
	if _, err := route(ctx, q, fleet).TryResult(); !errors.Is(err, routing.ErrQueueFull) {
		t.Errorf("request beyond the queue: %v, want ErrQueueFull", err)
	}
}

func TestQueueCancelledRequestLeavesAtOnce(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 1)
	q := newQueue(10)
	busy, err := route(context.Background(), q, fleet).TryResult()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	leaving := route(ctx, q, fleet)
	staying := route(context.Background(), q, fleet)
	cancel()
	<-leaving.Settled()
	if _, err := leaving.TryResult(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request settled with %v, want context.Canceled", err)
	}
	if n := waiting(fleet); n != 1 {
		t.Errorf("waiting after the cancel = %d, want 1", n)
	}
	busy.Release(0)
	tg, err := staying.TryResult()
	if err != nil {
		t.Fatalf("the request behind the cancelled one: %v", err)
	}
	tg.Release(0)
	if n := fleet.Pod(0).Load().InFlight(); n != 0 {
		t.Errorf("in flight at the end = %d, want 0", n)
	}
}

// TestQueueStress routes many requests through a small capacity from many goroutines,
// some of them cancelled, and checks that every request settles and every counter
// returns to zero.
func TestQueueStress(t *testing.T) {
	fleet := routingtest.NewFleet("llama", 4)
	q := routing.NewQueue(leastInFlight{},
		routing.Options{Reserver: cacheTracker, StaleAfter: routingtest.StaleAfter, MaxInFlight: 2},
		cacheTracker, routing.QueueOptions{MaxQueued: 1000})
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rc := route(ctx, q, fleet)
			if i%7 == 0 {
				cancel()
			}
			tg, err := rc.Wait()
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("request %d: %v", i, err)
				}
				return
			}
			if n := tg.Pod.Load().InFlight(); n > 2 {
				t.Errorf("pod %s has %d in flight, over the cap of 2", tg.Pod.Key, n)
			}
			tg.Release(1)
		})
	}
	wg.Wait()
	for i := range 4 {
		if n := fleet.Pod(i).Load().InFlight(); n != 0 {
			t.Errorf("pod %d: %d still in flight", i, n)
		}
	}
	if n := waiting(fleet); n != 0 {
		t.Errorf("%d still waiting", n)
	}
}
