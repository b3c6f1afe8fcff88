package routetable

import (
	"cmp"
	"strings"
)

// hostPattern is a compiled hostname: any host, one exact host, or a wildcard that matches
// every host with at least one more label in front of its suffix.
type hostPattern struct {
	// exact is the lower-cased hostname, set for an exact pattern.
	exact string
	// suffix is the lower-cased wildcard suffix including its leading dot (".example.com"),
	// set for a wildcard pattern.
	suffix string
}

// parseHostPattern compiles a listener or route hostname; "" matches any host.
func parseHostPattern(h string) hostPattern {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if rest, ok := strings.CutPrefix(h, "*"); ok {
		return hostPattern{suffix: rest}
	}
	return hostPattern{exact: h}
}

func (p hostPattern) any() bool      { return p.exact == "" && p.suffix == "" }
func (p hostPattern) wildcard() bool { return p.suffix != "" }

// String returns the hostname as written in the API: "", "a.example.com" or
// "*.example.com".
func (p hostPattern) String() string {
	if p.wildcard() {
		return "*" + p.suffix
	}
	return p.exact
}

// matches reports whether host, a request host without port, matches p, ignoring case.
func (p hostPattern) matches(host string) bool {
	switch {
	case p.wildcard():
		return len(host) > len(p.suffix) && strings.EqualFold(host[len(host)-len(p.suffix):], p.suffix)
	case p.exact != "":
		return strings.EqualFold(host, p.exact)
	default:
		return true
	}
}

// covers reports whether every host that q matches is matched by p.
func (p hostPattern) covers(q hostPattern) bool {
	switch {
	case p.any():
		return true
	case q.any():
		return false
	case q.wildcard():
		return p.wildcard() && strings.HasSuffix(q.suffix, p.suffix)
	default:
		return p.matches(q.exact)
	}
}

// intersect returns the hostnames both a listener and a route hostname match, expressed
// as the more specific of the two, or false when they are disjoint.
func intersect(listener, route hostPattern) (hostPattern, bool) {
	switch {
	case listener.covers(route):
		return route, true
	case route.covers(listener):
		return listener, true
	default:
		return hostPattern{}, false
	}
}

// compare orders patterns most specific first, per the HTTPRoute hostnames precedence:
// more characters in a matching non-wildcard hostname, then more characters in a matching
// hostname. Any host sorts last.
func (p hostPattern) compare(q hostPattern) int {
	return cmp.Or(
		-cmp.Compare(len(p.exact), len(q.exact)),
		-cmp.Compare(len(p.suffix), len(q.suffix)),
	)
}

// requestHost returns the Host header value without its port and trailing dot.
func requestHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	return strings.TrimSuffix(h, ".")
}
