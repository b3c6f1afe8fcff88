package httpfilter

import (
	"fmt"
	"net/http"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Chain is the compiled filters of one HTTPRoute rule or backendRef. It is immutable once
// Compile returns it, so any number of goroutines may use it at once. A nil *Chain is valid
// and applies nothing.
type Chain struct {
	request  *headerOps
	response *headerOps
	redirect *redirect
	rewrite  *rewrite
}

// Compile compiles filters, the whole filter list of one rule or backendRef.
//
// ExtensionRef and RequestMirror filters are skipped without a problem: the caller
// implements them. problems describes, one message each, every other filter that cannot
// be honoured: an unsupported type ("filter type CORS is not supported"), a repeated or
// forbidden combination, or an invalid value. Gateway API forbids skipping such a filter,
// so when problems is non-empty the caller MUST answer the requests the filters apply to
// with 500 and report problems in the route's status; the chain is then nil.
//
// The chain is also nil when the filters have nothing for this package to do.
func Compile(filters []gatewayv1.HTTPRouteFilter) (*Chain, []string) {
	var c Chain
	var problems []string
	seen := make(map[gatewayv1.HTTPRouteFilterType]bool, len(filters))
	for _, f := range filters {
		switch f.Type {
		case gatewayv1.HTTPRouteFilterExtensionRef, gatewayv1.HTTPRouteFilterRequestMirror:
			continue
		case gatewayv1.HTTPRouteFilterRequestHeaderModifier, gatewayv1.HTTPRouteFilterResponseHeaderModifier,
			gatewayv1.HTTPRouteFilterRequestRedirect, gatewayv1.HTTPRouteFilterURLRewrite:
		default:
			problems = append(problems, fmt.Sprintf("filter type %s is not supported", f.Type))
			continue
		}
		if seen[f.Type] {
			problems = append(problems, fmt.Sprintf("%s filter cannot be repeated", f.Type))
			continue
		}
		seen[f.Type] = true
		var errs []string
		switch f.Type {
		case gatewayv1.HTTPRouteFilterRequestHeaderModifier:
			if f.RequestHeaderModifier == nil {
				errs = missing(f.Type, "requestHeaderModifier")
				break
			}
			c.request, errs = compileHeaders("requestHeaderModifier", f.RequestHeaderModifier, true)
		case gatewayv1.HTTPRouteFilterResponseHeaderModifier:
			if f.ResponseHeaderModifier == nil {
				errs = missing(f.Type, "responseHeaderModifier")
				break
			}
			c.response, errs = compileHeaders("responseHeaderModifier", f.ResponseHeaderModifier, false)
		case gatewayv1.HTTPRouteFilterRequestRedirect:
			if f.RequestRedirect == nil {
				errs = missing(f.Type, "requestRedirect")
				break
			}
			c.redirect, errs = compileRedirect(f.RequestRedirect)
		case gatewayv1.HTTPRouteFilterURLRewrite:
			if f.URLRewrite == nil {
				errs = missing(f.Type, "urlRewrite")
				break
			}
			c.rewrite, errs = compileRewrite(f.URLRewrite)
		}
		problems = append(problems, errs...)
	}
	if seen[gatewayv1.HTTPRouteFilterRequestRedirect] && seen[gatewayv1.HTTPRouteFilterURLRewrite] {
		problems = append(problems, "RequestRedirect and URLRewrite filters cannot be combined")
	}
	if len(problems) > 0 || c == (Chain{}) {
		return nil, problems
	}
	return &c, nil
}

func missing(t gatewayv1.HTTPRouteFilterType, field string) []string {
	return []string{fmt.Sprintf("%s filter without %s", t, field)}
}

// Empty reports whether the chain applies nothing; a nil chain is empty.
func (c *Chain) Empty() bool {
	return c == nil || *c == Chain{}
}

// CheckMatches describes why matches, the matches of the rule the chain belongs to, cannot
// carry the chain: Gateway API allows a ReplacePrefixMatch path modifier only on a rule
// with exactly one PathPrefix match (no matches stands for the default PathPrefix "/").
// Such a rule is not Accepted. It returns nil when the combination is valid.
func (c *Chain) CheckMatches(matches []gatewayv1.HTTPRouteMatch) []string {
	if c == nil || singlePathPrefix(matches) {
		return nil
	}
	var problems []string
	if c.redirect != nil && c.redirect.path.kind == replacePrefix {
		problems = append(problems, "When using RequestRedirect filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified")
	}
	if c.rewrite != nil && c.rewrite.path.kind == replacePrefix {
		problems = append(problems, "When using URLRewrite filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified")
	}
	return problems
}

func singlePathPrefix(matches []gatewayv1.HTTPRouteMatch) bool {
	switch len(matches) {
	case 0:
		return true
	case 1:
		p := matches[0].Path
		return p == nil || p.Type == nil || *p.Type == gatewayv1.PathMatchPathPrefix
	}
	return false
}

// Redirect reports whether the chain answers r with a RequestRedirect, and with which
// Location and status code; the caller writes that response instead of proxying r.
//
// matchedPrefix is the PathPrefix value of the HTTPRouteMatch that selected the rule, with
// or without a trailing slash ("" when the match was not a PathPrefix, which leaves a
// ReplacePrefixMatch path unchanged). listenerPort is the port of the Listener r arrived on
// (0 when unknown: no port is then derived from it) and scheme the Listener's, "http" or
// "https".
func (c *Chain) Redirect(r *http.Request, matchedPrefix string, listenerPort int32, scheme string) (location string, status int, ok bool) {
	if c == nil || c.redirect == nil {
		return "", 0, false
	}
	return c.redirect.location(r, matchedPrefix, listenerPort, scheme), c.redirect.status, true
}

// ModifyRequest applies the RequestHeaderModifier and URLRewrite filters to out, the
// request about to be sent upstream: its Header, its Host (the Host header sent) and its
// URL.Path and URL.RawPath. The query string and out.URL.Host (the upstream address) are
// left alone. Header keys are taken to be canonical, as net/http makes them.
// matchedPrefix is as for Redirect.
func (c *Chain) ModifyRequest(out *http.Request, matchedPrefix string) {
	if c == nil {
		return
	}
	if c.request != nil {
		if out.Header == nil {
			out.Header = make(http.Header)
		}
		c.request.apply(out.Header)
	}
	if c.rewrite != nil {
		c.rewrite.apply(out, matchedPrefix)
	}
}

// ModifyResponse applies the ResponseHeaderModifier filter to h, the non-nil header of a
// response about to be written to the client. Header keys are taken to be canonical, as
// net/http makes them.
func (c *Chain) ModifyResponse(h http.Header) {
	if c == nil || c.response == nil {
		return
	}
	c.response.apply(h)
}
