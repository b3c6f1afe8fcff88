// Package iprange parses a contiguous range of IP addresses written as a CIDR prefix
// ("127.0.1.0/24") or as an inclusive range of two addresses of one family
// ("127.0.1.1-127.0.1.254"), as the manager's Gateway address pool and the pod runner's
// pod IP range are given.
package iprange

import (
	"fmt"
	"net/netip"
	"strings"
)

// Range is an inclusive range of addresses of one family.
type Range struct {
	// First and Last are the range's first and last addresses; every address of a
	// prefix for one written as a prefix.
	First, Last netip.Addr
	// Prefix is the prefix the range was written as; invalid for a first-last range.
	Prefix netip.Prefix
}

// Parse parses s, a CIDR prefix or a first-last range.
func Parse(s string) (Range, error) {
	s = strings.TrimSpace(s)
	if from, to, ok := strings.Cut(s, "-"); ok {
		first, err := netip.ParseAddr(strings.TrimSpace(from))
		if err != nil {
			return Range{}, fmt.Errorf("first address: %w", err)
		}
		last, err := netip.ParseAddr(strings.TrimSpace(to))
		if err != nil {
			return Range{}, fmt.Errorf("last address: %w", err)
		}
		first, last = first.Unmap(), last.Unmap()
		switch {
		case first.Is4() != last.Is4():
			return Range{}, fmt.Errorf("%s and %s are of different IP families", first, last)
		case last.Less(first):
			return Range{}, fmt.Errorf("%s comes after %s", first, last)
		case first.Zone() != "" || last.Zone() != "":
			return Range{}, fmt.Errorf("addresses must not have a zone")
		}
		return Range{First: first, Last: last}, nil
	}
	prefix, err := netip.ParsePrefix(s)
	if err != nil {
		return Range{}, fmt.Errorf("neither a CIDR prefix nor a range first-last: %w", err)
	}
	prefix = prefix.Masked()
	// The last address has every host bit of the prefix set.
	bytes := prefix.Addr().AsSlice()
	for bit := prefix.Bits(); bit < len(bytes)*8; bit++ {
		bytes[bit/8] |= 0x80 >> (bit % 8)
	}
	last, _ := netip.AddrFromSlice(bytes)
	return Range{First: prefix.Addr(), Last: last, Prefix: prefix}, nil
}

// String returns the range as Parse reads it.
func (r Range) String() string {
	if r.Prefix.IsValid() {
		return r.Prefix.String()
	}
	return r.First.String() + "-" + r.Last.String()
}
