// Package ipam hands out pod IP addresses from a range of IPv4 addresses local to this
// machine, one per running pod. It owns only the bookkeeping: binding the addresses is
// up to the processes that use them. On Linux every 127.0.0.0/8 address is local without
// configuration; another range is once routed to the loopback interface, as
// hack/conformance.sh does in a network namespace of its own
// (`ip addr add 198.18.0.1/15 dev lo`).
package ipam

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/switchboard-llm/switchboard/internal/iprange"
)

// ErrExhausted is returned by Allocate when every address of the pool is in use.
var ErrExhausted = errors.New("no free address in the pod IP range")

// Pool is a range of addresses, each allocated to at most one user at a time. It is
// safe for concurrent use.
type Pool struct {
	first, last uint32 // the range, inclusive

	mu   sync.Mutex
	used map[uint32]bool
	next uint32 // where the next search starts, so that freed addresses rest a while
}

// NewPool returns a pool of the addresses spec names: "first-last" (inclusive, such as
// "127.0.2.1-127.0.2.254") or a CIDR prefix (such as "127.0.2.0/24"), whose network and
// broadcast addresses are left out when it has more than two addresses. The first and
// last addresses must be IPv4 addresses this machine can bind, so that pods never get
// addresses that lead elsewhere.
func NewPool(spec string) (*Pool, error) {
	first, last, err := parseRange(spec)
	if err != nil {
		return nil, fmt.Errorf("pod IP range %q: %w", spec, err)
	}
	for _, a := range []netip.Addr{first, last} {
		if err := local(a); err != nil {
			return nil, fmt.Errorf("pod IP range %q: %w", spec, err)
		}
	}
	p := &Pool{first: toUint(first), last: toUint(last), used: map[uint32]bool{}}
	p.next = p.first // iprange.Parse refuses a range whose last address comes first
	return p, nil
}

// local checks that a is an IPv4 address of this machine, by binding it.
func local(a netip.Addr) error {
	if !a.Is4() {
		return fmt.Errorf("%s is not an IPv4 address", a)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		return fmt.Errorf("%s is not a local address of this machine (127.0.0.0/8 always is): %w", a, err)
	}
	return ln.Close()
}

// parseRange parses "first-last" or a CIDR prefix into its first and last usable
// IPv4 addresses: a prefix of more than two addresses loses its network and broadcast
// addresses.
func parseRange(spec string) (first, last netip.Addr, err error) {
	r, err := iprange.Parse(spec)
	if err != nil {
		return first, last, err
	}
	if !r.First.Is4() {
		return first, last, errors.New("only IPv4 ranges are supported")
	}
	lo, hi := toUint(r.First), toUint(r.Last)
	if r.Prefix.IsValid() && r.Prefix.Bits() < 31 {
		lo, hi = lo+1, hi-1 // network and broadcast addresses
	}
	return fromUint(lo), fromUint(hi), nil
}

// Allocate returns a free address and marks it used, or ErrExhausted. It cycles
// through the range rather than returning the lowest free address, so an address
// just released is handed out again only once the others have been.
func (p *Pool) Allocate() (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.next
	for range uint64(p.last-p.first) + 1 {
		if !p.used[a] {
			p.used[a] = true
			p.next = p.step(a)
			return fromUint(a), nil
		}
		a = p.step(a)
	}
	return netip.Addr{}, ErrExhausted
}

// step returns the address after a in the range, wrapping around.
func (p *Pool) step(a uint32) uint32 {
	if a == p.last {
		return p.first
	}
	return a + 1
}

// Claim marks a used if it is a free address of the pool and reports whether it did:
// a pod that had an address keeps it.
func (p *Pool) Claim(a netip.Addr) bool {
	if !p.Contains(a) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used[toUint(a)] {
		return false
	}
	p.used[toUint(a)] = true
	return true
}

// Release marks a free again; releasing an address that is not in use does nothing.
func (p *Pool) Release(a netip.Addr) {
	if !p.Contains(a) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, toUint(a))
}

// Contains reports whether a is an address of the pool.
func (p *Pool) Contains(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	n := toUint(a)
	return p.first <= n && n <= p.last
}

// String returns the pool's range as "first-last".
func (p *Pool) String() string {
	return fromUint(p.first).String() + "-" + fromUint(p.last).String()
}

func toUint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func fromUint(n uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}
