package sessionaffinity

import (
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// sameShard returns the i-th session hash of shard 0.
func sameShard(i int) uint64 { return uint64(i * shardCount) }

func TestTableRefusesNewSessionsWhenFull(t *testing.T) {
	const ttl = time.Minute
	tab := newTable(ttl, 2*shardCount) // two sessions per shard
	k := endpoint.Key{Namespace: "ns", Name: "p"}
	t0 := time.Unix(0, 0)
	for i := range 3 {
		tab.record(sameShard(i), k, t0)
	}
	for i, want := range []bool{true, true, false} {
		if _, ok := tab.lookup(sameShard(i), t0); ok != want {
			t.Errorf("session %d recorded = %v, want %v", i, ok, want)
		}
	}

	other := endpoint.Key{Namespace: "ns", Name: "q"}
	tab.record(sameShard(0), other, t0) // known sessions still update when full
	if got, _ := tab.lookup(sameShard(0), t0); got != other {
		t.Errorf("session 0 endpoint = %v, want %v", got, other)
	}

	t1 := t0.Add(ttl + tab.touchEvery + time.Nanosecond) // sessions 0 and 1 expired; the sweep is due
	tab.record(sameShard(2), k, t1)
	if _, ok := tab.lookup(sameShard(2), t1); !ok {
		t.Error("session 2 not recorded after the full shard expired")
	}
	if n := len(tab.shard(0).sessions); n != 1 {
		t.Errorf("shard holds %d sessions after the sweep, want 1", n)
	}
}

func TestTableSweepsAtMostOncePerPruneInterval(t *testing.T) {
	const ttl = time.Minute
	tab := newTable(ttl, 1<<10)
	k := endpoint.Key{Namespace: "ns", Name: "p"}
	t0 := time.Unix(0, 0)
	every := tab.pruneEvery

	tab.record(sameShard(0), k, t0)
	tab.record(sameShard(1), k, t0.Add(ttl-every/2)) // sweeps, finding nothing expired
	expiredAt := t0.Add(ttl + tab.touchEvery + time.Nanosecond)
	tab.record(sameShard(2), k, expiredAt) // within pruneEvery of the last sweep
	if _, ok := tab.lookup(sameShard(0), expiredAt); ok {
		t.Error("expired session 0 still looked up")
	}
	if n := len(tab.shard(0).sessions); n != 3 {
		t.Errorf("shard holds %d sessions before the next sweep, want 3", n)
	}
	tab.record(sameShard(2), k, t0.Add(ttl-every/2+every)) // the next sweep
	if n := len(tab.shard(0).sessions); n != 2 {
		t.Errorf("shard holds %d sessions after the sweep, want 2", n)
	}
}

func TestTableWritesARepeatedSessionOncePerTouchInterval(t *testing.T) {
	const ttl = time.Minute
	tab := newTable(ttl, 1<<10)
	p, q := endpoint.Key{Namespace: "ns", Name: "p"}, endpoint.Key{Namespace: "ns", Name: "q"}
	t0 := time.Unix(0, 0)
	written := func() session { return tab.shard(1).sessions[1] }

	tab.record(1, p, t0)
	tab.record(1, p, t0.Add(tab.touchEvery/2)) // the same endpoint, soon after: not written
	if got := written(); !got.lastUse.Equal(t0) {
		t.Errorf("last use = %v, want %v", got.lastUse, t0)
	}
	t1 := t0.Add(tab.touchEvery / 2)
	tab.record(1, q, t1) // another endpoint: written at once
	if got := written(); got.endpoint != q || !got.lastUse.Equal(t1) {
		t.Errorf("after a move: %+v, want %v at %v", got, q, t1)
	}
	t2 := t1.Add(tab.touchEvery)
	tab.record(1, q, t2) // a touch interval later: written
	if got := written(); !got.lastUse.Equal(t2) {
		t.Errorf("last use = %v, want %v", got.lastUse, t2)
	}
	// A use not written is at most touchEvery after the last written one, so the
	// session lives at least ttl after every use.
	if _, ok := tab.lookup(1, t2.Add(ttl+tab.touchEvery)); !ok {
		t.Error("the session expired within ttl + touchEvery of its last written use")
	}
	if _, ok := tab.lookup(1, t2.Add(ttl+tab.touchEvery+time.Nanosecond)); ok {
		t.Error("the session outlived ttl + touchEvery after its last written use")
	}
}
