package httpfilter

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Filter builders, so that a test case reads like the HTTPRoute YAML it stands for.

func requestHeaders(f gatewayv1.HTTPHeaderFilter) gatewayv1.HTTPRouteFilter {
	return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &f}
}

func responseHeaders(f gatewayv1.HTTPHeaderFilter) gatewayv1.HTTPRouteFilter {
	return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &f}
}

func redirectTo(f gatewayv1.HTTPRequestRedirectFilter) gatewayv1.HTTPRouteFilter {
	return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestRedirect, RequestRedirect: &f}
}

func rewriteTo(f gatewayv1.HTTPURLRewriteFilter) gatewayv1.HTTPRouteFilter {
	return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterURLRewrite, URLRewrite: &f}
}

func headers(kv ...string) []gatewayv1.HTTPHeader {
	var hs []gatewayv1.HTTPHeader
	for i := 0; i < len(kv); i += 2 {
		hs = append(hs, gatewayv1.HTTPHeader{Name: gatewayv1.HTTPHeaderName(kv[i]), Value: kv[i+1]})
	}
	return hs
}

func fullPath(p string) *gatewayv1.HTTPPathModifier {
	return &gatewayv1.HTTPPathModifier{Type: gatewayv1.FullPathHTTPPathModifier, ReplaceFullPath: &p}
}

func prefixPath(p string) *gatewayv1.HTTPPathModifier {
	return &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: &p}
}

func hostname(h string) *gatewayv1.PreciseHostname { return ptr.To(gatewayv1.PreciseHostname(h)) }

func pathMatch(t gatewayv1.PathMatchType, v string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: &t, Value: &v}}
}

// mustCompile compiles filters that must have no problems.
func mustCompile(t testing.TB, filters ...gatewayv1.HTTPRouteFilter) *Chain {
	t.Helper()
	c, problems := Compile(filters)
	if len(problems) > 0 {
		t.Fatalf("Compile: %q", problems)
	}
	return c
}

// request is a request to target (an absolute URL, whose host becomes Host) with the
// given header lines.
func request(target string, kv ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

// header builds an http.Header from name, value pairs, a name repeated for each value.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}
