package httpfilter

import (
	"fmt"
	"testing"

	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestRedirect(t *testing.T) {
	for _, tc := range []struct {
		name   string
		filter gatewayv1.HTTPRequestRedirectFilter
		target string // the request; its host is the Host header
		prefix string // the matched PathPrefix
		port   int32  // the Listener's
		scheme string // the Listener's
		want   string
		status int
	}{{
		name:   "hostname, default status 302 (conformance /hostname-redirect)",
		filter: gatewayv1.HTTPRequestRedirectFilter{Hostname: hostname("example.org")},
		target: "http://192.0.2.1/hostname-redirect", prefix: "/hostname-redirect", port: 80, scheme: "http",
		want: "http://example.org/hostname-redirect", status: 302,
	}, {
		name:   "hostname and status 301 (conformance /host-and-status)",
		filter: gatewayv1.HTTPRequestRedirectFilter{Hostname: hostname("example.org"), StatusCode: ptr.To(301)},
		target: "http://192.0.2.1/host-and-status", prefix: "/host-and-status", port: 80, scheme: "http",
		want: "http://example.org/host-and-status", status: 301,
	}, {
		name:   "status 303 (conformance /see-other)",
		filter: gatewayv1.HTTPRequestRedirectFilter{StatusCode: ptr.To(303)},
		target: "http://gw.example/see-other", prefix: "/see-other", port: 80, scheme: "http",
		want: "http://gw.example/see-other", status: 303,
	}, {
		name:   "status 307",
		filter: gatewayv1.HTTPRequestRedirectFilter{StatusCode: ptr.To(307)},
		target: "http://gw.example/temporary", prefix: "/temporary", port: 80, scheme: "http",
		want: "http://gw.example/temporary", status: 307,
	}, {
		name:   "status 308",
		filter: gatewayv1.HTTPRequestRedirectFilter{StatusCode: ptr.To(308)},
		target: "http://gw.example/permanent", prefix: "/permanent", port: 80, scheme: "http",
		want: "http://gw.example/permanent", status: 308,
	}, {
		name:   "hostname defaults to the request's Host without its port",
		filter: gatewayv1.HTTPRequestRedirectFilter{Port: ptr.To[int32](8083)},
		target: "http://gw.example:8080/port", prefix: "/port", port: 8080, scheme: "http",
		want: "http://gw.example:8083/port", status: 302,
	}, {
		name:   "port (conformance /port)",
		filter: gatewayv1.HTTPRequestRedirectFilter{Port: ptr.To[int32](8083)},
		target: "http://192.0.2.1/port", prefix: "/port", port: 80, scheme: "http",
		want: "http://192.0.2.1:8083/port", status: 302,
	}, {
		name:   "port and hostname and status (conformance /port-and-host-and-status)",
		filter: gatewayv1.HTTPRequestRedirectFilter{Port: ptr.To[int32](8083), Hostname: hostname("example.org"), StatusCode: ptr.To(302)},
		target: "http://192.0.2.1/port-and-host-and-status", prefix: "/port-and-host-and-status", port: 80, scheme: "http",
		want: "http://example.org:8083/port-and-host-and-status", status: 302,
	}, {
		name:   "scheme https drops a non-default request port (conformance /scheme)",
		filter: gatewayv1.HTTPRequestRedirectFilter{Scheme: ptr.To("https")},
		target: "http://gw.example:8080/scheme", prefix: "/scheme", port: 8080, scheme: "http",
		want: "https://gw.example/scheme", status: 302,
	}, {
		name:   "scheme set to the Listener's own still uses its well-known port",
		filter: gatewayv1.HTTPRequestRedirectFilter{Scheme: ptr.To("http"), Hostname: hostname("example.org")},
		target: "http://gw.example:8080/x", prefix: "/x", port: 8080, scheme: "http",
		want: "http://example.org/x", status: 302,
	}, {
		name:   "ReplacePrefixMatch (conformance /original-prefix)",
		filter: gatewayv1.HTTPRequestRedirectFilter{Path: prefixPath("/replacement-prefix")},
		target: "http://gw.example/original-prefix/lemon", prefix: "/original-prefix", port: 80, scheme: "http",
		want: "http://gw.example/replacement-prefix/lemon", status: 302,
	}, {
		name:   "ReplacePrefixMatch of the whole path, with hostname (conformance /path-and-host)",
		filter: gatewayv1.HTTPRequestRedirectFilter{Hostname: hostname("example.org"), Path: prefixPath("/replacement-prefix")},
		target: "http://gw.example/path-and-host", prefix: "/path-and-host", port: 80, scheme: "http",
		want: "http://example.org/replacement-prefix", status: 302,
	}, {
		name:   "ReplaceFullPath (conformance /full)",
		filter: gatewayv1.HTTPRequestRedirectFilter{Path: fullPath("/full-path-replacement")},
		target: "http://gw.example/full/path/original", prefix: "/full", port: 80, scheme: "http",
		want: "http://gw.example/full-path-replacement", status: 302,
	}, {
		name:   "ReplaceFullPath and status (conformance /full-path-and-status)",
		filter: gatewayv1.HTTPRequestRedirectFilter{Path: fullPath("/replacement-full"), StatusCode: ptr.To(301)},
		target: "http://gw.example/full-path-and-status", prefix: "/full-path-and-status", port: 80, scheme: "http",
		want: "http://gw.example/replacement-full", status: 301,
	}, {
		name:   "query string is kept as sent",
		filter: gatewayv1.HTTPRequestRedirectFilter{Path: prefixPath("/new")},
		target: "http://gw.example/old/a?b=c%20d&e", prefix: "/old", port: 80, scheme: "http",
		want: "http://gw.example/new/a?b=c%20d&e", status: 302,
	}, {
		name:   "path kept with its encoding",
		filter: gatewayv1.HTTPRequestRedirectFilter{Scheme: ptr.To("https")},
		target: "http://gw.example/a%2Fb/c%20d", prefix: "/", port: 80, scheme: "http",
		want: "https://gw.example/a%2Fb/c%20d", status: 302,
	}, {
		name:   "ReplacePrefixMatch keeps the encoding of the rest",
		filter: gatewayv1.HTTPRequestRedirectFilter{Path: prefixPath("/new")},
		target: "http://gw.example/old/a%2Fb", prefix: "/old", port: 80, scheme: "http",
		want: "http://gw.example/new/a%2Fb", status: 302,
	}, {
		name:   "ReplacePrefixMatch when the client escaped the prefix itself",
		filter: gatewayv1.HTTPRequestRedirectFilter{Path: prefixPath("/new")},
		target: "http://gw.example/%6Fld/a", prefix: "/old", port: 80, scheme: "http",
		want: "http://gw.example/new/a", status: 302,
	}, {
		name:   "replacement paths are escaped",
		filter: gatewayv1.HTTPRequestRedirectFilter{Path: fullPath("/a b?c")},
		target: "http://gw.example/x", prefix: "/x", port: 80, scheme: "http",
		want: "http://gw.example/a%20b%3Fc", status: 302,
	}, {
		name:   "ReplacePrefixMatch without a PathPrefix match keeps the path",
		filter: gatewayv1.HTTPRequestRedirectFilter{Path: prefixPath("/new")},
		target: "http://gw.example/old/a", prefix: "", port: 80, scheme: "http",
		want: "http://gw.example/old/a", status: 302,
	}, {
		name:   "IPv6 Host keeps its brackets",
		filter: gatewayv1.HTTPRequestRedirectFilter{StatusCode: ptr.To(301)},
		target: "http://[2001:db8::1]:8080/x", prefix: "/", port: 8080, scheme: "http",
		want: "http://[2001:db8::1]:8080/x", status: 301,
	}, {
		name:   "IPv6 Host on a well-known port",
		filter: gatewayv1.HTTPRequestRedirectFilter{Scheme: ptr.To("https")},
		target: "http://[2001:db8::1]:8080/x", prefix: "/", port: 8080, scheme: "http",
		want: "https://[2001:db8::1]/x", status: 302,
	}, {
		name:   "unknown Listener port is not written",
		filter: gatewayv1.HTTPRequestRedirectFilter{Hostname: hostname("example.org")},
		target: "http://gw.example:8080/x", prefix: "/", port: 0, scheme: "http",
		want: "http://example.org/x", status: 302,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, redirectTo(tc.filter))
			loc, status, ok := c.Redirect(request(tc.target), tc.prefix, tc.port, tc.scheme)
			if !ok || loc != tc.want || status != tc.status {
				t.Errorf("Redirect = %q, %d, %t; want %q, %d, true", loc, status, ok, tc.want, tc.status)
			}
		})
	}
}

// TestRedirectPortAndScheme is conformance httproute-redirect-port-and-scheme: every
// combination of filter scheme and port on HTTP Listeners on 80 and 8080 and an HTTPS
// Listener on 443, and beyond it an HTTPS Listener on 8443. The conformance suite accepts the well-known port written or not; the
// spec says SHOULD NOT write it, so it is never written here.
func TestRedirectPortAndScheme(t *testing.T) {
	for _, tc := range []struct {
		listenerScheme string
		listenerPort   int32
		scheme         *string
		port           *int32
		want           string
	}{
		{"http", 80, nil, nil, "http://example.org/p"},
		{"http", 80, nil, ptr.To[int32](80), "http://example.org/p"},
		{"http", 80, nil, ptr.To[int32](8080), "http://example.org:8080/p"},
		{"http", 80, ptr.To("https"), nil, "https://example.org/p"},
		{"http", 80, ptr.To("https"), ptr.To[int32](443), "https://example.org/p"},
		{"http", 80, ptr.To("https"), ptr.To[int32](8443), "https://example.org:8443/p"},
		{"http", 8080, nil, nil, "http://example.org:8080/p"},
		{"http", 8080, nil, ptr.To[int32](80), "http://example.org/p"},
		{"http", 8080, ptr.To("https"), nil, "https://example.org/p"},
		{"https", 443, nil, nil, "https://example.org/p"},
		{"https", 443, nil, ptr.To[int32](443), "https://example.org/p"},
		{"https", 443, nil, ptr.To[int32](8443), "https://example.org:8443/p"},
		{"https", 443, ptr.To("http"), nil, "http://example.org/p"},
		{"https", 443, ptr.To("http"), ptr.To[int32](80), "http://example.org/p"},
		{"https", 443, ptr.To("http"), ptr.To[int32](8080), "http://example.org:8080/p"},
		{"https", 8443, nil, nil, "https://example.org:8443/p"},
		{"https", 8443, nil, ptr.To[int32](80), "https://example.org:80/p"},
	} {
		name := fmt.Sprintf("%s listener on %d, scheme %s, port %d",
			tc.listenerScheme, tc.listenerPort, ptr.Deref(tc.scheme, "nil"), ptr.Deref(tc.port, 0))
		t.Run(name, func(t *testing.T) {
			c := mustCompile(t, redirectTo(gatewayv1.HTTPRequestRedirectFilter{
				Hostname: hostname("example.org"), Scheme: tc.scheme, Port: tc.port,
			}))
			target := fmt.Sprintf("%s://192.0.2.1:%d/p", tc.listenerScheme, tc.listenerPort)
			loc, _, _ := c.Redirect(request(target), "/p", tc.listenerPort, tc.listenerScheme)
			if loc != tc.want {
				t.Errorf("Location = %q, want %q", loc, tc.want)
			}
		})
	}
}

// TestRedirectWithoutHost covers an HTTP/1.0 request with no Host and no filter hostname:
// the Location is a path-only reference that cannot name another host.
func TestRedirectWithoutHost(t *testing.T) {
	for _, tc := range []struct {
		name, path, want string
	}{
		{"path", "/a?b=c", "/a?b=c"},
		{"leading double slash", "//evil.example/a", "/.//evil.example/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, redirectTo(gatewayv1.HTTPRequestRedirectFilter{Scheme: ptr.To("https")}))
			r := request("http://gw.example" + tc.path)
			r.Host = ""
			if loc, _, _ := c.Redirect(r, "/", 80, "http"); loc != tc.want {
				t.Errorf("Location = %q, want %q", loc, tc.want)
			}
		})
	}
}
