package routetable

import (
	"cmp"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"strings"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// pathKind orders path match types by precedence: Exact, then RegularExpression (whose
// precedence Gateway API leaves to the implementation), then PathPrefix.
type pathKind uint8

const (
	pathExact pathKind = iota
	pathRegex
	pathPrefix
)

// match is one compiled HTTPRouteMatch. Conditions are ANDed.
type match struct {
	kind pathKind
	// path is the Exact value, or the PathPrefix value without a trailing slash ("/" for
	// the root prefix).
	path    string
	pathRE  *regexp.Regexp
	method  string
	headers []valueMatch
	query   []valueMatch
}

// valueMatch is a header or query parameter condition: exact value, or a regular
// expression when re is set.
type valueMatch struct {
	// name is the canonical header key, or the exact query parameter name.
	name  string
	value string
	re    *regexp.Regexp
}

func (v *valueMatch) matches(s string) bool {
	if v.re != nil {
		return v.re.MatchString(s)
	}
	return s == v.value
}

// matches reports whether r, whose URL path is path, satisfies every condition of m.
func (m *match) matches(r *http.Request, path string) bool {
	switch m.kind {
	case pathExact:
		if path != m.path {
			return false
		}
	case pathPrefix:
		if m.path != "/" && (!strings.HasPrefix(path, m.path) ||
			len(path) > len(m.path) && path[len(m.path)] != '/') {
			return false
		}
	case pathRegex:
		if !m.pathRE.MatchString(path) {
			return false
		}
	}
	if m.method != "" && r.Method != m.method {
		return false
	}
	for i := range m.headers {
		h := &m.headers[i]
		var v string
		if h.name == "Host" {
			v = r.Host // net/http moves Host out of the header map
		} else if vs := r.Header[h.name]; len(vs) > 0 {
			v = vs[0]
		} else {
			return false
		}
		if !h.matches(v) {
			return false
		}
	}
	if len(m.query) > 0 && r.URL == nil {
		return false
	}
	for i := range m.query {
		q := &m.query[i]
		v, ok := firstQueryValue(r.URL.RawQuery, q.name)
		if !ok || !q.matches(v) {
			return false
		}
	}
	return true
}

// firstQueryValue returns the first value of the query parameter name in raw, as Gateway
// API recommends for repeated parameters. It allocates only for escaped keys or values.
func firstQueryValue(raw, name string) (string, bool) {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if key, err := url.QueryUnescape(k); err != nil || key != name {
			continue
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return "", false
		}
		return val, true
	}
	return "", false
}

// compileMatch compiles one HTTPRouteMatch, or reports false when the gateway cannot honour
// it (an unknown match type, a path that does not start with "/", an invalid regular
// expression): such a match never matches, rather than matching more than was asked.
func compileMatch(hm gatewayv1.HTTPRouteMatch) (match, bool) {
	m := match{kind: pathPrefix, path: "/"}
	if p := hm.Path; p != nil {
		value := "/"
		if p.Value != nil {
			value = *p.Value
		}
		typ := gatewayv1.PathMatchPathPrefix
		if p.Type != nil {
			typ = *p.Type
		}
		switch typ {
		case gatewayv1.PathMatchExact:
			if !strings.HasPrefix(value, "/") {
				return match{}, false
			}
			m.kind, m.path = pathExact, value
		case gatewayv1.PathMatchPathPrefix:
			if !strings.HasPrefix(value, "/") {
				return match{}, false
			}
			if value != "/" {
				value = strings.TrimSuffix(value, "/")
			}
			m.kind, m.path = pathPrefix, value
		case gatewayv1.PathMatchRegularExpression:
			re, err := anchored(value)
			if err != nil {
				return match{}, false
			}
			m.kind, m.path, m.pathRE = pathRegex, value, re
		default:
			return match{}, false
		}
	}
	if hm.Method != nil {
		m.method = string(*hm.Method)
	}
	seen := map[string]bool{}
	for _, h := range hm.Headers {
		name := textproto.CanonicalMIMEHeaderKey(string(h.Name))
		if seen[name] {
			continue // only the first entry for an equivalent name counts
		}
		seen[name] = true
		vm, ok := compileValue(name, h.Value, h.Type == nil || *h.Type == gatewayv1.HeaderMatchExact,
			h.Type != nil && *h.Type == gatewayv1.HeaderMatchRegularExpression)
		if !ok {
			return match{}, false
		}
		m.headers = append(m.headers, vm)
	}
	clear(seen)
	for _, q := range hm.QueryParams {
		name := string(q.Name)
		if seen[name] {
			continue
		}
		seen[name] = true
		vm, ok := compileValue(name, q.Value, q.Type == nil || *q.Type == gatewayv1.QueryParamMatchExact,
			q.Type != nil && *q.Type == gatewayv1.QueryParamMatchRegularExpression)
		if !ok {
			return match{}, false
		}
		m.query = append(m.query, vm)
	}
	return m, true
}

func compileValue(name, value string, exact, regex bool) (valueMatch, bool) {
	switch {
	case exact:
		return valueMatch{name: name, value: value}, true
	case regex:
		re, err := anchored(value)
		if err != nil {
			return valueMatch{}, false
		}
		return valueMatch{name: name, value: value, re: re}, true
	default:
		return valueMatch{}, false
	}
}

// anchored compiles expr (RE2 syntax) to match a whole string, not a substring.
func anchored(expr string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// rank is an entry's place in Gateway API precedence; lower compares first.
type rank struct {
	host       hostPattern
	kind       pathKind
	pathLen    int
	method     bool
	headers    int
	query      int
	created    time.Time
	route      string // "namespace/name"
	ruleIndex  int
	matchIndex int
}

// compare orders ranks by precedence: the most specific hostname; an Exact path, then a
// RegularExpression, then a PathPrefix path, longer first within each; a method match;
// more header matches; more query parameter matches; the oldest route; the route first by
// namespace/name; the first rule, then the first match, within a route.
func (a rank) compare(b rank) int {
	return cmp.Or(
		a.host.compare(b.host),
		cmp.Compare(a.kind, b.kind),
		-cmp.Compare(a.pathLen, b.pathLen),
		-compareBool(a.method, b.method),
		-cmp.Compare(a.headers, b.headers),
		-cmp.Compare(a.query, b.query),
		a.created.Compare(b.created),
		cmp.Compare(a.route, b.route),
		cmp.Compare(a.ruleIndex, b.ruleIndex),
		cmp.Compare(a.matchIndex, b.matchIndex),
	)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}
