package httpfilter

import (
	"reflect"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestModifyRequestRewrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		filter   gatewayv1.HTTPURLRewriteFilter
		target   string
		prefix   string
		wantHost string
		wantURI  string // EscapedPath and query
	}{{
		name:   "hostname (conformance rewrite-host /one)",
		filter: gatewayv1.HTTPURLRewriteFilter{Hostname: hostname("one.example.org")},
		target: "http://rewrite.example/one", prefix: "/one",
		wantHost: "one.example.org", wantURI: "/one",
	}, {
		name:   "hostname replaces a Host with a port",
		filter: gatewayv1.HTTPURLRewriteFilter{Hostname: hostname("example.org")},
		target: "http://rewrite.example:8080/two?q=1", prefix: "/",
		wantHost: "example.org", wantURI: "/two?q=1",
	}, {
		name:   "ReplacePrefixMatch (conformance /prefix/one)",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/one")},
		target: "http://gw.example/prefix/one/two", prefix: "/prefix/one",
		wantHost: "gw.example", wantURI: "/one/two",
	}, {
		name:   "ReplacePrefixMatch / strips the prefix (conformance /strip-prefix)",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/")},
		target: "http://gw.example/strip-prefix/three", prefix: "/strip-prefix",
		wantHost: "gw.example", wantURI: "/three",
	}, {
		name:   "ReplacePrefixMatch / of the whole path gives / (conformance /strip-prefix)",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/")},
		target: "http://gw.example/strip-prefix", prefix: "/strip-prefix",
		wantHost: "gw.example", wantURI: "/",
	}, {
		name:   "ReplaceFullPath (conformance /full/one)",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: fullPath("/one")},
		target: "http://gw.example/full/one/two", prefix: "/full/one",
		wantHost: "gw.example", wantURI: "/one",
	}, {
		name:   "ReplacePrefixMatch with a replacement that is a prefix of the match",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/prefix")},
		target: "http://gw.example/prefix/rewrite-path-and-modify-headers/one", prefix: "/prefix/rewrite-path-and-modify-headers",
		wantHost: "gw.example", wantURI: "/prefix/one",
	}, {
		name:   "hostname and path together, query kept",
		filter: gatewayv1.HTTPURLRewriteFilter{Hostname: hostname("api.internal"), Path: prefixPath("/v1")},
		target: "http://gw.example/openai/chat/completions?stream=true&x=%2F", prefix: "/openai",
		wantHost: "api.internal", wantURI: "/v1/chat/completions?stream=true&x=%2F",
	}, {
		name:   "the root prefix prepends the replacement",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/v1")},
		target: "http://gw.example/chat", prefix: "/",
		wantHost: "gw.example", wantURI: "/v1/chat",
	}, {
		name:   "the root prefix on the root path keeps its trailing slash",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/v1")},
		target: "http://gw.example/", prefix: "/",
		wantHost: "gw.example", wantURI: "/v1/",
	}, {
		name:   "an empty request path is the root path",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/v1")},
		target: "http://gw.example?q=1", prefix: "/",
		wantHost: "gw.example", wantURI: "/v1/?q=1",
	}, {
		name:   "the rest of the path keeps its encoding",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/one")},
		target: "http://gw.example/prefix/one/a%2Fb%20c", prefix: "/prefix/one",
		wantHost: "gw.example", wantURI: "/one/a%2Fb%20c",
	}, {
		name:   "a replacement with reserved characters is escaped",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/a b")},
		target: "http://gw.example/x/y%2Fz", prefix: "/x",
		wantHost: "gw.example", wantURI: "/a%20b/y%2Fz",
	}, {
		name:   "ReplaceFullPath drops the request's encoding",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: fullPath("/one")},
		target: "http://gw.example/a%2Fb", prefix: "/",
		wantHost: "gw.example", wantURI: "/one",
	}, {
		name:   "ReplacePrefixMatch without a PathPrefix match keeps the path",
		filter: gatewayv1.HTTPURLRewriteFilter{Path: prefixPath("/one")},
		target: "http://gw.example/prefix/one/two", prefix: "",
		wantHost: "gw.example", wantURI: "/prefix/one/two",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, rewriteTo(tc.filter))
			out := request(tc.target, "X-Keep", "k")
			upstream := out.URL.Host
			c.ModifyRequest(out, tc.prefix)
			if out.Host != tc.wantHost || out.URL.RequestURI() != tc.wantURI {
				t.Errorf("Host, URI = %q, %q; want %q, %q", out.Host, out.URL.RequestURI(), tc.wantHost, tc.wantURI)
			}
			if out.URL.Host != upstream || len(out.Header) != 1 {
				t.Errorf("URL.Host %q or header %v changed", out.URL.Host, out.Header)
			}
			if _, _, ok := c.Redirect(request(tc.target), tc.prefix, 80, "http"); ok {
				t.Error("a URLRewrite chain redirects")
			}
		})
	}
}

// TestRewriteAndHeaders is conformance httproute-rewrite-host and -path
// rewrite-path-and-modify-headers: a URLRewrite and a RequestHeaderModifier on one rule.
func TestRewriteAndHeaders(t *testing.T) {
	c := mustCompile(t,
		rewriteTo(gatewayv1.HTTPURLRewriteFilter{Hostname: hostname("test.example.org"), Path: fullPath("/test")}),
		requestHeaders(gatewayv1.HTTPHeaderFilter{
			Set:    headers("X-Header-Set", "set-overwrites-values"),
			Add:    headers("X-Header-Add", "header-val-1", "X-Header-Add-Append", "header-val-2"),
			Remove: []string{"X-Header-Remove"},
		}))
	out := request("http://rewrite.example/full/rewrite-path-and-modify-headers/test",
		"X-Header-Remove", "remove-val", "X-Header-Add-Append", "append-val-1", "X-Header-Set", "set-val")
	c.ModifyRequest(out, "/full/rewrite-path-and-modify-headers")
	want := header("X-Header-Add", "header-val-1", "X-Header-Add-Append", "append-val-1",
		"X-Header-Add-Append", "header-val-2", "X-Header-Set", "set-overwrites-values")
	if out.Host != "test.example.org" || out.URL.Path != "/test" || !reflect.DeepEqual(out.Header, want) {
		t.Errorf("Host %q, path %q, header %v; want test.example.org, /test, %v", out.Host, out.URL.Path, out.Header, want)
	}
}

// TestReplacePrefixMatchSpecTable is the table in the ReplacePrefixMatch doc comment, and
// the edge cases of conformance prefix "/prefix/one", for both URLRewrite and
// RequestRedirect.
func TestReplacePrefixMatchSpecTable(t *testing.T) {
	for _, tc := range []struct {
		path, prefix, replace, want string
	}{
		{"/foo/bar", "/foo", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo", "/xyz/", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz/", "/xyz/bar"},
		{"/foo", "/foo", "/xyz", "/xyz"},
		{"/foo/", "/foo", "/xyz", "/xyz/"},
		{"/foo/bar", "/foo", "", "/bar"},
		{"/foo/", "/foo", "", "/"},
		{"/foo", "/foo", "", "/"},
		{"/foo/", "/foo", "/", "/"},
		{"/foo", "/foo", "/", "/"},
		{"/prefix/one", "/prefix/one", "/", "/"},
		{"/prefix/one/", "/prefix/one", "/", "/"},
		{"/prefix/one/two", "/prefix/one", "/", "/two"},
		{"/prefix/one/two/", "/prefix/one", "/", "/two/"},
		{"/prefix/one", "/prefix/one", "/one", "/one"},
		{"/prefix/one/", "/prefix/one", "/one", "/one/"},
		{"/prefix/one/two", "/prefix/one", "/one", "/one/two"},
		{"/prefix/one/two", "/prefix/one/", "/one/", "/one/two"},
		{"/prefix/one//two", "/prefix/one", "/one", "/one//two"},
		// A prefix that does not match whole path elements cannot have selected the
		// rule; the path is left unchanged rather than cut mid-element.
		{"/prefix/oneself", "/prefix/one", "/one", "/prefix/oneself"},
	} {
		t.Run(tc.path+" "+tc.prefix+" "+tc.replace, func(t *testing.T) {
			rw := mustCompile(t, rewriteTo(gatewayv1.HTTPURLRewriteFilter{Path: prefixPath(tc.replace)}))
			out := request("http://gw.example" + tc.path)
			rw.ModifyRequest(out, tc.prefix)
			if out.URL.Path != tc.want {
				t.Errorf("rewritten path = %q, want %q", out.URL.Path, tc.want)
			}
			rd := mustCompile(t, redirectTo(gatewayv1.HTTPRequestRedirectFilter{Path: prefixPath(tc.replace)}))
			if loc, _, _ := rd.Redirect(request("http://gw.example"+tc.path), tc.prefix, 80, "http"); loc != "http://gw.example"+tc.want {
				t.Errorf("Location = %q, want http://gw.example%s", loc, tc.want)
			}
		})
	}
}
