package ipam

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
)

func TestNewPoolRanges(t *testing.T) {
	for spec, want := range map[string]string{
		"127.0.2.1-127.0.2.254":   "127.0.2.1-127.0.2.254",
		" 127.0.2.7 - 127.0.2.7 ": "127.0.2.7-127.0.2.7",
		"127.0.2.0/24":            "127.0.2.1-127.0.2.254",
		"127.0.2.9/24":            "127.0.2.1-127.0.2.254",
		"127.0.3.0/31":            "127.0.3.0-127.0.3.1",
		"127.0.3.5/32":            "127.0.3.5-127.0.3.5",
		"127.1.0.0/16":            "127.1.0.1-127.1.255.254",
	} {
		p, err := NewPool(spec)
		if err != nil || p.String() != want {
			t.Errorf("NewPool(%q) = %v, %v; want %s", spec, p, err, want)
		}
	}
}

func TestNewPoolRejects(t *testing.T) {
	for _, spec := range []string{
		"", "127.0.2.1", "127.0.2.9-127.0.2.1", "203.0.113.1-203.0.113.9", "203.0.113.0/24",
		"::1-::2", "::1/128", "127.0.2.1-x", "127.0.2.1-127.0.2", "127.0.2.0/33",
	} {
		if p, err := NewPool(spec); err == nil {
			t.Errorf("NewPool(%q) = %v, want an error", spec, p)
		}
	}
}

func TestAllocateCyclesAndExhausts(t *testing.T) {
	p, err := NewPool("127.0.2.1-127.0.2.3")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		a, err := p.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a.String())
	}
	if want := []string{"127.0.2.1", "127.0.2.2", "127.0.2.3"}; !slices.Equal(got, want) {
		t.Errorf("allocated %v, want %v", got, want)
	}
	if a, err := p.Allocate(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Allocate on a full pool = %v, %v; want ErrExhausted", a, err)
	}
	p.Release(netip.MustParseAddr("127.0.2.2"))
	p.Release(netip.MustParseAddr("127.0.2.1"))
	// The search goes on after the last address handed out: .1 comes before .2.
	if a, err := p.Allocate(); err != nil || a.String() != "127.0.2.1" {
		t.Errorf("Allocate = %v, %v; want 127.0.2.1", a, err)
	}
	if a, err := p.Allocate(); err != nil || a.String() != "127.0.2.2" {
		t.Errorf("Allocate = %v, %v; want 127.0.2.2", a, err)
	}
}

func TestReleasedAddressRestsUntilOthersAreUsed(t *testing.T) {
	p, err := NewPool("127.0.2.1-127.0.2.4")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Allocate()
	p.Release(a)
	b, _ := p.Allocate()
	if a == b {
		t.Errorf("a released address was handed out again at once: %v", a)
	}
}

func TestClaim(t *testing.T) {
	p, err := NewPool("127.0.2.1-127.0.2.3")
	if err != nil {
		t.Fatal(err)
	}
	two := netip.MustParseAddr("127.0.2.2")
	if !p.Claim(two) {
		t.Fatal("Claim of a free address failed")
	}
	if p.Claim(two) {
		t.Error("an address was claimed twice")
	}
	if p.Claim(netip.MustParseAddr("127.0.2.9")) || p.Claim(netip.Addr{}) {
		t.Error("an address outside the pool was claimed")
	}
	for range 2 {
		if a, err := p.Allocate(); err != nil || a == two {
			t.Errorf("Allocate = %v, %v; want a free address other than %v", a, err, two)
		}
	}
	p.Release(netip.MustParseAddr("10.0.0.1")) // outside: ignored
	p.Release(two)
	if !p.Claim(two) {
		t.Error("a released address could not be claimed")
	}
}

func TestConcurrentAllocationsAreDistinct(t *testing.T) {
	p, err := NewPool("127.0.2.0/24")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[netip.Addr]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 30 {
				a, err := p.Allocate()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[a] {
					t.Errorf("%v allocated twice", a)
				}
				seen[a] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != 240 {
		t.Errorf("allocated %d addresses, want 240", len(seen))
	}
}
