package cache

import (
	"fmt"
	"sync"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/percore"
)

func TestReserveRelease(t *testing.T) {
	c := New()
	c.UpsertPod(makePod("a").Build())
	m, _ := c.Model("llama")
	p := m.Endpoints()[0]

	r := Tracker{}.Reserve(m, p, 100)
	if p.Load().InFlight() != 1 || m.Load().InFlight() != 1 {
		t.Fatalf("in flight = %d/%d, want 1/1", p.Load().InFlight(), m.Load().InFlight())
	}
	if r.Pod() != p {
		t.Error("Reservation.Pod() is not the reserved pod")
	}
	r.Release(40)
	r.Release(40)
	type counters interface {
		InFlight() int64
		TokensIn() int64
		TokensOut() int64
	}
	for _, l := range []counters{p.Load(), m.Load()} {
		if l.InFlight() != 0 || l.TokensIn() != 100 || l.TokensOut() != 40 {
			t.Errorf("load = in flight %d, in %d, out %d; want 0, 100, 40", l.InFlight(), l.TokensIn(), l.TokensOut())
		}
	}
}

func TestReservationSurvivesPodUpdate(t *testing.T) {
	c := New()
	c.UpsertPod(makePod("a").Build())
	m, _ := c.Model("llama")
	r := Tracker{}.Reserve(m, m.Endpoints()[0], 1)
	c.UpsertPod(makePod("a").IP("10.0.0.2").Build())
	p, _ := c.Pod(endpoint.Key{Namespace: "ns", Name: "a"})
	if p.Load().InFlight() != 1 {
		t.Fatalf("in flight after update = %d, want 1", p.Load().InFlight())
	}
	r.Release(0)
	if p.Load().InFlight() != 0 {
		t.Errorf("in flight after release = %d, want 0", p.Load().InFlight())
	}
}

func TestTryReserveLimitConcurrent(t *testing.T) {
	const limit, goroutines = 5, 64
	c := New()
	c.UpsertPod(makePod("a").Build())
	m, _ := c.Model("llama")
	p := m.Endpoints()[0]

	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got []*Reservation
	)
	for range goroutines {
		wg.Go(func() {
			if r := new(Reservation); (Tracker{}).TryReserveInto(r, m, p, limit, 1) {
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(got) != limit || p.Load().InFlight() != limit {
		t.Fatalf("reserved %d (in flight %d), want %d", len(got), p.Load().InFlight(), limit)
	}
	for _, r := range got {
		wg.Go(func() { r.Release(1) })
		wg.Go(func() { r.Release(1) })
	}
	wg.Wait()
	if p.Load().InFlight() != 0 || m.Load().InFlight() != 0 || p.Load().TokensOut() != limit {
		t.Errorf("after release: pod %d, model %d in flight, %d tokens out", p.Load().InFlight(), m.Load().InFlight(), p.Load().TokensOut())
	}
}

func TestQueuedTicket(t *testing.T) {
	var l Load
	tk := Tracker{}.Queue(&l)
	if l.Waiting() != 1 {
		t.Fatalf("Waiting() = %d, want 1", l.Waiting())
	}
	tk.Done()
	tk.Done()
	if l.Waiting() != 0 {
		t.Errorf("Waiting() = %d after Done twice, want 0", l.Waiting())
	}
}

// TestModelLoadSumsItsStripes reserves from many goroutines, on whichever stripes their
// cores hint, and releases from others, and checks that the model's counters are the
// sums, and that each release returns to the stripe its reservation counted on.
func TestModelLoadSumsItsStripes(t *testing.T) {
	c := New()
	const pods = 3 * percore.StripeCount
	for i := range pods {
		c.UpsertPod(makePod(fmt.Sprintf("p%02d", i)).Build())
	}
	m, _ := c.Model("llama")
	var wg sync.WaitGroup
	reservations := make([]*Reservation, pods*10)
	for i := range reservations {
		wg.Go(func() { reservations[i] = Tracker{}.Reserve(m, m.Pods()[i%pods], 2) })
	}
	wg.Wait()
	if n, in := m.Load().InFlight(), m.Load().TokensIn(); n != int64(len(reservations)) || in != 2*n {
		t.Errorf("model counts %d in flight, %d tokens in; want %d, %d", n, in, len(reservations), 2*len(reservations))
	}
	for _, r := range reservations {
		wg.Go(func() { r.Release(1) })
	}
	wg.Wait()
	if n, out := m.Load().InFlight(), m.Load().TokensOut(); n != 0 || out != int64(len(reservations)) {
		t.Errorf("after release: %d in flight, %d tokens out; want 0, %d", n, out, len(reservations))
	}
	i := 0
	for s := range m.load.stripes.All() {
		if n := s.InFlight(); n != 0 {
			t.Errorf("stripe %d left at %d in flight", i, n)
		}
		i++
	}
}
