package httpfilter

import (
	"fmt"
	"net/http"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// headerOps is a compiled HTTPHeaderFilter. Keys are canonical and each names one action.
type headerOps struct {
	remove []string
	set    []headerField
	add    []headerField
}

type headerField struct {
	key, value string
}

// compileHeaders compiles f, the filter in field. For a request filter the Host header is
// refused: net/http keeps it outside the header map, and URLRewrite is the filter for it.
func compileHeaders(field string, f *gatewayv1.HTTPHeaderFilter, request bool) (*headerOps, []string) {
	var ops headerOps
	var problems []string
	claimed := make(map[string]bool, len(f.Set)+len(f.Add)+len(f.Remove))
	// claim reports whether name may take an action: one action per header name.
	claim := func(key string) bool {
		switch {
		case request && key == "Host":
			problems = append(problems, fmt.Sprintf("%s cannot modify the Host header; use the hostname of a URLRewrite filter", field))
		case claimed[key]:
			problems = append(problems, fmt.Sprintf("%s: more than one action for header %s", field, key))
		default:
			claimed[key] = true
			return true
		}
		return false
	}
	compile := func(list string, hs []gatewayv1.HTTPHeader) []headerField {
		var out []headerField
		for _, h := range hs {
			name := string(h.Name)
			if !validHeaderName(name) {
				problems = append(problems, fmt.Sprintf("%s.%s: header name %q is not valid", field, list, name))
				continue
			}
			key := http.CanonicalHeaderKey(name)
			if !validHeaderValue(h.Value) {
				problems = append(problems, fmt.Sprintf("%s.%s: value of header %s contains a control character", field, list, key))
				continue
			}
			if claim(key) {
				out = append(out, headerField{key, h.Value})
			}
		}
		return out
	}
	ops.set = compile("set", f.Set)
	ops.add = compile("add", f.Add)
	for _, name := range f.Remove {
		if key := http.CanonicalHeaderKey(name); claim(key) {
			ops.remove = append(ops.remove, key)
		}
	}
	if len(problems) > 0 || len(ops.set)+len(ops.add)+len(ops.remove) == 0 {
		return nil, problems
	}
	return &ops, nil
}

// apply edits h. Set replaces every value; add appends one value after the existing ones,
// which is the same header as appending ",value" to a single field line.
func (o *headerOps) apply(h http.Header) {
	for _, k := range o.remove {
		delete(h, k)
	}
	for _, s := range o.set {
		h[s.key] = []string{s.value}
	}
	for _, a := range o.add {
		h[a.key] = append(h[a.key], a.value)
	}
}

// validHeaderName reports whether name is an RFC 7230 token, as the HeaderName type
// requires.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c < 0x80 && isTokenPunct[c]:
		default:
			return false
		}
	}
	return true
}

var isTokenPunct = [128]bool{
	'!': true, '#': true, '$': true, '%': true, '&': true, '\'': true, '*': true, '+': true,
	'-': true, '.': true, '^': true, '_': true, '`': true, '|': true, '~': true,
}

// validHeaderValue reports whether v can be sent as a field value: no control characters
// other than horizontal tab, so no CR or LF that would split the header.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
