package httpfilter

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestCompileProblems(t *testing.T) {
	extensionRef := gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterExtensionRef,
		ExtensionRef: &gatewayv1.LocalObjectReference{Group: "inference.switchboard.dev", Kind: "RoutingPolicy", Name: "p"}}
	for _, tc := range []struct {
		name    string
		filters []gatewayv1.HTTPRouteFilter
		want    []string
	}{{
		name:    "CORS",
		filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterCORS, CORS: &gatewayv1.HTTPCORSFilter{}}},
		want:    []string{"filter type CORS is not supported"},
	}, {
		name:    "ExternalAuth and an unknown type, beside a filter left to the caller",
		filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterExternalAuth}, extensionRef, {Type: "Compress"}},
		want:    []string{"filter type ExternalAuth is not supported", "filter type Compress is not supported"},
	}, {
		name: "missing configuration",
		filters: []gatewayv1.HTTPRouteFilter{
			{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier}, {Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier},
			{Type: gatewayv1.HTTPRouteFilterRequestRedirect},
		},
		want: []string{
			"RequestHeaderModifier filter without requestHeaderModifier",
			"ResponseHeaderModifier filter without responseHeaderModifier",
			"RequestRedirect filter without requestRedirect",
		},
	}, {
		name:    "missing urlRewrite",
		filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterURLRewrite}},
		want:    []string{"URLRewrite filter without urlRewrite"},
	}, {
		name: "repeated filters",
		filters: []gatewayv1.HTTPRouteFilter{
			requestHeaders(gatewayv1.HTTPHeaderFilter{Remove: []string{"A"}}), requestHeaders(gatewayv1.HTTPHeaderFilter{Remove: []string{"B"}}),
			responseHeaders(gatewayv1.HTTPHeaderFilter{Remove: []string{"A"}}), responseHeaders(gatewayv1.HTTPHeaderFilter{Remove: []string{"B"}}),
			rewriteTo(gatewayv1.HTTPURLRewriteFilter{}), rewriteTo(gatewayv1.HTTPURLRewriteFilter{}),
		},
		want: []string{
			"RequestHeaderModifier filter cannot be repeated",
			"ResponseHeaderModifier filter cannot be repeated",
			"URLRewrite filter cannot be repeated",
		},
	}, {
		name: "RequestRedirect with URLRewrite",
		filters: []gatewayv1.HTTPRouteFilter{
			redirectTo(gatewayv1.HTTPRequestRedirectFilter{}), rewriteTo(gatewayv1.HTTPURLRewriteFilter{}),
			redirectTo(gatewayv1.HTTPRequestRedirectFilter{}),
		},
		want: []string{"RequestRedirect filter cannot be repeated", "RequestRedirect and URLRewrite filters cannot be combined"},
	}, {
		name: "one action per header name, compared case-insensitively",
		filters: []gatewayv1.HTTPRouteFilter{requestHeaders(gatewayv1.HTTPHeaderFilter{
			Set: headers("x-a", "1", "X-A", "2"), Add: headers("X-b", "1"), Remove: []string{"x-B"},
		})},
		want: []string{
			"requestHeaderModifier: more than one action for header X-A",
			"requestHeaderModifier: more than one action for header X-B",
		},
	}, {
		name: "invalid header names and values",
		filters: []gatewayv1.HTTPRouteFilter{responseHeaders(gatewayv1.HTTPHeaderFilter{
			Set: headers("X A", "1", ":authority", "x", "", "x"), Add: headers("X-Inject", "a\r\nSet-Cookie: b", "X-Del", "a\x7f"),
		})},
		want: []string{
			`responseHeaderModifier.set: header name "X A" is not valid`,
			`responseHeaderModifier.set: header name ":authority" is not valid`,
			`responseHeaderModifier.set: header name "" is not valid`,
			"responseHeaderModifier.add: value of header X-Inject contains a control character",
			"responseHeaderModifier.add: value of header X-Del contains a control character",
		},
	}, {
		name: "Host in a request header modifier",
		filters: []gatewayv1.HTTPRouteFilter{requestHeaders(gatewayv1.HTTPHeaderFilter{
			Set: headers("host", "a.example"), Remove: []string{"Host"},
		})},
		want: []string{
			"requestHeaderModifier cannot modify the Host header; use the hostname of a URLRewrite filter",
			"requestHeaderModifier cannot modify the Host header; use the hostname of a URLRewrite filter",
		},
	}, {
		name: "invalid redirect",
		filters: []gatewayv1.HTTPRouteFilter{redirectTo(gatewayv1.HTTPRequestRedirectFilter{
			Scheme: ptr.To("ftp"), Hostname: hostname("*.example.org"), Port: ptr.To[int32](0), StatusCode: ptr.To(304),
			Path: &gatewayv1.HTTPPathModifier{Type: "ReplaceRegex"},
		})},
		want: []string{
			`requestRedirect.scheme "ftp" is not supported`,
			`requestRedirect.hostname "*.example.org" is not a valid hostname`,
			"requestRedirect.port 0 is not between 1 and 65535",
			"requestRedirect.statusCode 304 is not supported",
			`requestRedirect.path.type "ReplaceRegex" is not supported`,
		},
	}, {
		name: "redirect hostname with a port, path type without its value",
		filters: []gatewayv1.HTTPRouteFilter{redirectTo(gatewayv1.HTTPRequestRedirectFilter{
			Hostname: hostname("example.org:8080"), Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.FullPathHTTPPathModifier},
		})},
		want: []string{
			`requestRedirect.hostname "example.org:8080" is not a valid hostname`,
			"requestRedirect.path.replaceFullPath must be specified when type is set to 'ReplaceFullPath'",
		},
	}, {
		name: "invalid rewrite",
		filters: []gatewayv1.HTTPRouteFilter{rewriteTo(gatewayv1.HTTPURLRewriteFilter{
			Hostname: hostname("Example.org"), Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier},
		})},
		want: []string{
			`urlRewrite.hostname "Example.org" is not a valid hostname`,
			"urlRewrite.path.replacePrefixMatch must be specified when type is set to 'ReplacePrefixMatch'",
		},
	}, {
		name:    "relative replacement paths",
		filters: []gatewayv1.HTTPRouteFilter{rewriteTo(gatewayv1.HTTPURLRewriteFilter{Path: fullPath("one")})},
		want:    []string{`urlRewrite.path.replaceFullPath "one" must start with "/"`},
	}, {
		name:    "relative prefix replacement",
		filters: []gatewayv1.HTTPRouteFilter{redirectTo(gatewayv1.HTTPRequestRedirectFilter{Path: prefixPath("one")})},
		want:    []string{`requestRedirect.path.replacePrefixMatch "one" must be empty or start with "/"`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c, problems := Compile(tc.filters)
			if c != nil {
				t.Errorf("Compile returned a chain beside problems")
			}
			if !reflect.DeepEqual(problems, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", problems, tc.want)
			}
		})
	}
}

func TestCompileEmpty(t *testing.T) {
	mirror := gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: gatewayv1.BackendObjectReference{Name: "m"}}}
	extensionRef := gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterExtensionRef,
		ExtensionRef: &gatewayv1.LocalObjectReference{Name: "p"}}
	for _, tc := range []struct {
		name    string
		filters []gatewayv1.HTTPRouteFilter
	}{
		{"no filters", nil},
		{"ExtensionRef and RequestMirror, repeated, are the caller's", []gatewayv1.HTTPRouteFilter{extensionRef, mirror, mirror, extensionRef}},
		{"header modifiers without actions", []gatewayv1.HTTPRouteFilter{
			requestHeaders(gatewayv1.HTTPHeaderFilter{}), responseHeaders(gatewayv1.HTTPHeaderFilter{})}},
		{"URLRewrite without changes", []gatewayv1.HTTPRouteFilter{rewriteTo(gatewayv1.HTTPURLRewriteFilter{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, problems := Compile(tc.filters)
			if c != nil || problems != nil || !c.Empty() {
				t.Errorf("Compile = %v, %q; want an empty nil chain and no problems", c, problems)
			}
		})
	}
	if c := mustCompile(t, mirror, redirectTo(gatewayv1.HTTPRequestRedirectFilter{})); c.Empty() {
		t.Error("a chain with a RequestRedirect is empty")
	}
}

func TestCheckMatches(t *testing.T) {
	rewritePrefix := rewriteTo(gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/v1")})
	redirectPrefix := redirectTo(gatewayv1.HTTPRequestRedirectFilter{Path: prefixPath("/v1")})
	rewriteFull := rewriteTo(gatewayv1.HTTPURLRewriteFilter{Path: fullPath("/v1")})
	prefix := pathMatch(gatewayv1.PathMatchPathPrefix, "/a")
	exact := pathMatch(gatewayv1.PathMatchExact, "/a")
	const rewriteMsg = "When using URLRewrite filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified"
	const redirectMsg = "When using RequestRedirect filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified"
	for _, tc := range []struct {
		name    string
		filter  gatewayv1.HTTPRouteFilter
		matches []gatewayv1.HTTPRouteMatch
		want    []string
	}{
		{"one PathPrefix", rewritePrefix, []gatewayv1.HTTPRouteMatch{prefix}, nil},
		{"no matches is PathPrefix /", rewritePrefix, nil, nil},
		{"a match without a path is PathPrefix /", redirectPrefix, []gatewayv1.HTTPRouteMatch{{Method: ptr.To(gatewayv1.HTTPMethodGet)}}, nil},
		{"a path without a type is PathPrefix", rewritePrefix,
			[]gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Value: ptr.To("/a")}}}, nil},
		{"Exact", rewritePrefix, []gatewayv1.HTTPRouteMatch{exact}, []string{rewriteMsg}},
		{"two PathPrefix", redirectPrefix, []gatewayv1.HTTPRouteMatch{prefix, prefix}, []string{redirectMsg}},
		{"ReplaceFullPath accepts any match", rewriteFull, []gatewayv1.HTTPRouteMatch{exact, prefix}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustCompile(t, tc.filter).CheckMatches(tc.matches); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("CheckMatches = %q, want %q", got, tc.want)
			}
		})
	}
	var nilChain *Chain
	if got := nilChain.CheckMatches([]gatewayv1.HTTPRouteMatch{exact, exact}); got != nil {
		t.Errorf("nil chain CheckMatches = %q", got)
	}
}

func TestNilChain(t *testing.T) {
	var c *Chain
	r := request("http://gw.example/a?b", "X-A", "1")
	c.ModifyRequest(r, "/")
	h := header("X-A", "1")
	c.ModifyResponse(h)
	if _, _, ok := c.Redirect(r, "/", 80, "http"); ok || r.Host != "gw.example" || r.URL.RequestURI() != "/a?b" ||
		!reflect.DeepEqual(r.Header, header("X-A", "1")) || !reflect.DeepEqual(h, header("X-A", "1")) {
		t.Errorf("a nil chain acted")
	}
}

// TestNoAllocations checks that the request path costs no allocation where a chain has
// nothing to do for the call, and that removing headers is free.
func TestNoAllocations(t *testing.T) {
	respOnly := mustCompile(t, responseHeaders(gatewayv1.HTTPHeaderFilter{Set: headers("X-A", "1")}))
	removeOnly := mustCompile(t, requestHeaders(gatewayv1.HTTPHeaderFilter{Remove: []string{"X-A"}}),
		responseHeaders(gatewayv1.HTTPHeaderFilter{Remove: []string{"X-B"}}))
	r := request("http://gw.example/a", "X-A", "1")
	h := header("X-B", "1")
	for _, tc := range []struct {
		name string
		call func()
	}{
		{"nil chain", func() {
			var c *Chain
			c.Redirect(r, "/", 80, "http")
			c.ModifyRequest(r, "/")
			c.ModifyResponse(h)
		}},
		{"request side of a response-only chain", func() {
			respOnly.Redirect(r, "/", 80, "http")
			respOnly.ModifyRequest(r, "/")
		}},
		{"remove only", func() {
			removeOnly.ModifyRequest(r, "/")
			removeOnly.ModifyResponse(h)
		}},
	} {
		if allocs := testing.AllocsPerRun(100, tc.call); allocs != 0 {
			t.Errorf("%s: %v allocations per request, want 0", tc.name, allocs)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	c := mustCompile(t,
		requestHeaders(gatewayv1.HTTPHeaderFilter{Set: headers("X-S", "s"), Add: headers("X-A", "a")}),
		responseHeaders(gatewayv1.HTTPHeaderFilter{Add: headers("X-R", "r")}),
		rewriteTo(gatewayv1.HTTPURLRewriteFilter{Hostname: hostname("up.internal"), Path: prefixPath("/v1")}))
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				out := request("http://gw.example/api/x", "X-A", "0")
				c.ModifyRequest(out, "/api")
				resp := http.Header{}
				c.ModifyResponse(resp)
				if out.URL.Path != "/v1/x" || strings.Join(out.Header["X-A"], ",") != "0,a" || resp.Get("X-R") != "r" {
					t.Errorf("got path %q, header %v, response %v", out.URL.Path, out.Header, resp)
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
}

// BenchmarkModifyRequest measures a header modifier and a URL rewrite on a request
// copied as a reverse proxy copies it, the copy included.
func BenchmarkModifyRequest(b *testing.B) {
	c := mustCompile(b,
		requestHeaders(gatewayv1.HTTPHeaderFilter{
			Set: headers("X-Tenant", "a"), Add: headers("X-Route", "r"), Remove: []string{"Authorization"},
		}),
		rewriteTo(gatewayv1.HTTPURLRewriteFilter{Hostname: hostname("up.internal"), Path: prefixPath("/v1")}))
	in := request("http://gw.example/openai/chat/completions", "Authorization", "Bearer x", "X-Route", "q")
	b.ReportAllocs()
	for b.Loop() {
		out := *in
		u := *in.URL
		out.URL = &u
		out.Header = in.Header.Clone()
		c.ModifyRequest(&out, "/openai")
	}
}
