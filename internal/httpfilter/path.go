package httpfilter

import (
	"fmt"
	"net/url"
	"strings"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

type pathKind uint8

const (
	keepPath pathKind = iota
	replaceFull
	replacePrefix
)

// pathModifier is a compiled HTTPPathModifier. Paths are compared and built in decoded
// form, as route matching compares them; the escaped forms keep the rest of a request path
// encoded as the client sent it.
type pathModifier struct {
	kind pathKind
	// value is the full path, or the prefix replacement without trailing slashes.
	value string
	// escaped is value as URL.EscapedPath writes it.
	escaped string
}

// compilePath compiles pm, the path modifier of field ("requestRedirect", "urlRewrite");
// a nil pm keeps the path.
func compilePath(field string, pm *gatewayv1.HTTPPathModifier) (pathModifier, []string) {
	if pm == nil {
		return pathModifier{}, nil
	}
	var value *string
	var p pathModifier
	switch pm.Type {
	case gatewayv1.FullPathHTTPPathModifier:
		p.kind, value = replaceFull, pm.ReplaceFullPath
		if value == nil {
			return p, []string{fmt.Sprintf("%s.path.replaceFullPath must be specified when type is set to 'ReplaceFullPath'", field)}
		}
		if !strings.HasPrefix(*value, "/") {
			return p, []string{fmt.Sprintf("%s.path.replaceFullPath %q must start with \"/\"", field, *value)}
		}
		p.value = *value
	case gatewayv1.PrefixMatchHTTPPathModifier:
		p.kind, value = replacePrefix, pm.ReplacePrefixMatch
		if value == nil {
			return p, []string{fmt.Sprintf("%s.path.replacePrefixMatch must be specified when type is set to 'ReplacePrefixMatch'", field)}
		}
		if *value != "" && !strings.HasPrefix(*value, "/") {
			return p, []string{fmt.Sprintf("%s.path.replacePrefixMatch %q must be empty or start with \"/\"", field, *value)}
		}
		p.value = strings.TrimRight(*value, "/")
	default:
		return p, []string{fmt.Sprintf("%s.path.type %q is not supported", field, pm.Type)}
	}
	p.escaped = (&url.URL{Path: p.value}).EscapedPath()
	return p, nil
}

// apply returns the path and raw path (see url.URL.RawPath) that p makes of a request's.
// matchedPrefix is the PathPrefix that matched the request ("" for none).
func (p *pathModifier) apply(path, rawPath, matchedPrefix string) (string, string) {
	switch p.kind {
	case replaceFull:
		return p.value, ""
	case replacePrefix:
		if matchedPrefix == "" {
			return path, rawPath
		}
		if path == "" {
			path = "/"
		}
		prefix := strings.TrimRight(matchedPrefix, "/")
		if rawPath != "" {
			// URL.EscapedPath uses the new raw path only if it still encodes the new path,
			// which fails safe to the default encoding when the prefix was sent escaped.
			rawPath = swapPrefix(rawPath, (&url.URL{Path: prefix}).EscapedPath(), p.escaped)
		}
		return swapPrefix(path, prefix, p.value), rawPath
	}
	return path, rawPath
}

// swapPrefix replaces prefix, a path without trailing slashes matching whole path elements
// of path, with repl, also without trailing slashes. What follows the prefix, a trailing
// slash included, is kept; an empty result is "/". A path the prefix does not match is
// returned unchanged.
func swapPrefix(path, prefix, repl string) string {
	if !strings.HasPrefix(path, prefix) || len(path) > len(prefix) && path[len(prefix)] != '/' {
		return path
	}
	if out := repl + path[len(prefix):]; out != "" {
		return out
	}
	return "/"
}
