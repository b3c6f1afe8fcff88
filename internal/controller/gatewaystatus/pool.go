package gatewaystatus

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/iprange"
)

// DefaultAddressPool is the address pool of a manager run without --gateway-address-pool:
// loopback addresses, which every local run can bind without configuration.
const DefaultAddressPool = "127.0.1.1-127.0.1.254"

// AddressPool is a contiguous range of IP addresses of one family, from which Gateways
// without spec.addresses are given the address they are served on. It is immutable.
type AddressPool struct {
	first, last netip.Addr
	text        string
}

// ParseAddressPool parses a pool written as a CIDR prefix ("127.0.1.0/24", every address
// of the prefix) or as an inclusive range of two addresses of the same family
// ("127.0.1.1-127.0.1.254").
func ParseAddressPool(s string) (*AddressPool, error) {
	r, err := iprange.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("address pool %q: %w", s, err)
	}
	return &AddressPool{first: r.First, last: r.Last, text: r.String()}, nil
}

// String returns the pool as it would be parsed.
func (p *AddressPool) String() string { return p.text }

// contains reports whether a is an address of the pool.
func (p *AddressPool) contains(a netip.Addr) bool {
	a = a.Unmap()
	return a.Is4() == p.first.Is4() && !a.Less(p.first) && !p.last.Less(a)
}

// allocation is the outcome of giving pool addresses to the Gateways without
// spec.addresses.
type allocation struct {
	// addresses maps each such Gateway that has an address to it.
	addresses map[types.NamespacedName]netip.Addr
	// exhausted lists those that got none because every address is taken.
	exhausted map[types.NamespacedName]bool
}

// allocate gives every Gateway in gateways without spec.addresses one address of pool,
// none shared. A Gateway keeps the address its status already shows while that address
// is in the pool, named in no Gateway's spec.addresses and kept by no older Gateway;
// the others get the lowest free address, oldest Gateway first. A nil pool gives no
// Gateway an address.
func allocate(pool *AddressPool, gateways []*gatewayv1.Gateway) allocation {
	out := allocation{addresses: map[types.NamespacedName]netip.Addr{}, exhausted: map[types.NamespacedName]bool{}}
	if pool == nil {
		return out
	}
	taken := map[netip.Addr]bool{}
	var needing []*gatewayv1.Gateway
	for _, gw := range gateways {
		if len(gw.Spec.Addresses) == 0 {
			needing = append(needing, gw)
			continue
		}
		for _, a := range gw.Spec.Addresses {
			if ip, ok := ipAddress(a.Type, a.Value); ok {
				taken[ip] = true
			}
		}
	}
	slices.SortFunc(needing, func(a, b *gatewayv1.Gateway) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})

	var fresh []*gatewayv1.Gateway
	for _, gw := range needing {
		if ip, ok := statusAddress(gw); ok && pool.contains(ip) && !taken[ip] {
			taken[ip] = true
			out.addresses[keyOf(gw)] = ip
			continue
		}
		fresh = append(fresh, gw)
	}
	next := pool.first
	for _, gw := range fresh {
		for next.IsValid() && pool.contains(next) && taken[next] {
			next = next.Next()
		}
		if !next.IsValid() || !pool.contains(next) {
			out.exhausted[keyOf(gw)] = true
			continue
		}
		taken[next] = true
		out.addresses[keyOf(gw)] = next
	}
	return out
}

// statusAddress returns the address the Gateway's status shows, as the route table reads
// it: the first status.addresses entry of type IPAddress.
func statusAddress(gw *gatewayv1.Gateway) (netip.Addr, bool) {
	for _, a := range gw.Status.Addresses {
		if ip, ok := ipAddress(a.Type, a.Value); ok {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// ipAddress parses an address of type IPAddress (the default type).
func ipAddress(typ *gatewayv1.AddressType, value string) (netip.Addr, bool) {
	if typ != nil && *typ != gatewayv1.IPAddressType {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(value)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

func keyOf(gw *gatewayv1.Gateway) types.NamespacedName {
	return types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
}
