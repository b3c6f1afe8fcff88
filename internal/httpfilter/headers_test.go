package httpfilter

import (
	"net/http"
	"reflect"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// multiple and caseInsensitive are the filters of the conformance routes /multiple and
// /case-insensitivity (httproute-request-header-modifier.yaml,
// httproute-response-header-modifier.yaml).
var (
	multiple = gatewayv1.HTTPHeaderFilter{
		Set:    headers("X-Header-Set-1", "header-set-1", "X-Header-Set-2", "header-set-2"),
		Add:    headers("X-Header-Add-1", "header-add-1", "X-Header-Add-2", "header-add-2", "X-Header-Add-3", "header-add-3"),
		Remove: []string{"X-Header-Remove-1", "X-Header-Remove-2"},
	}
	caseInsensitive = gatewayv1.HTTPHeaderFilter{
		Set: headers("X-Header-Set", "header-set"),
		Add: headers("X-Header-Add", "header-add", "x-lowercase-add", "lowercase-add",
			"x-Mixedcase-ADD-1", "mixedcase-add-1", "X-UPPERCASE-ADD", "uppercase-add"),
		Remove: []string{"X-Header-Remove"},
	}
)

// headerCases are shared by the request and the response modifier: the same filter gives
// the same header map. A header listed twice in want has two values, which the
// conformance suite reads as the comma-joined "first,second".
var headerCases = []struct {
	name   string
	filter gatewayv1.HTTPHeaderFilter
	in     http.Header
	want   http.Header
}{{
	name:   "set adds a missing header",
	filter: gatewayv1.HTTPHeaderFilter{Set: headers("X-Header-Set", "set-overwrites-values")},
	in:     header("Some-Other-Header", "val"),
	want:   header("Some-Other-Header", "val", "X-Header-Set", "set-overwrites-values"),
}, {
	name:   "set overwrites every value",
	filter: gatewayv1.HTTPHeaderFilter{Set: headers("X-Header-Set", "set-overwrites-values")},
	in:     header("Some-Other-Header", "val", "X-Header-Set", "some-other-value", "X-Header-Set", "another"),
	want:   header("Some-Other-Header", "val", "X-Header-Set", "set-overwrites-values"),
}, {
	name:   "add adds a missing header",
	filter: gatewayv1.HTTPHeaderFilter{Add: headers("X-Header-Add", "add-appends-values")},
	in:     header("Some-Other-Header", "val"),
	want:   header("Some-Other-Header", "val", "X-Header-Add", "add-appends-values"),
}, {
	name:   "add appends after existing values",
	filter: gatewayv1.HTTPHeaderFilter{Add: headers("X-Header-Add", "add-appends-values")},
	in:     header("Some-Other-Header", "val", "X-Header-Add", "some-other-value"),
	want:   header("Some-Other-Header", "val", "X-Header-Add", "some-other-value", "X-Header-Add", "add-appends-values"),
}, {
	name:   "add keeps a comma-separated value as one value",
	filter: gatewayv1.HTTPHeaderFilter{Add: headers("My-Header", "bar,baz")},
	in:     header("My-Header", "foo"),
	want:   header("My-Header", "foo", "My-Header", "bar,baz"),
}, {
	name:   "remove deletes every value",
	filter: gatewayv1.HTTPHeaderFilter{Remove: []string{"X-Header-Remove"}},
	in:     header("X-Header-Remove", "val", "X-Header-Remove", "val2", "Keep", "k"),
	want:   header("Keep", "k"),
}, {
	name:   "remove of an absent header is a no-op",
	filter: gatewayv1.HTTPHeaderFilter{Remove: []string{"X-Header-Remove"}},
	in:     header("Keep", "k"),
	want:   header("Keep", "k"),
}, {
	name:   "set, add and remove together",
	filter: multiple,
	in: header("X-Header-Set-2", "set-val-2", "X-Header-Add-2", "add-val-2",
		"X-Header-Remove-2", "remove-val-2", "X-Header-Remove-1", "val", "Another-Header", "another-header-val"),
	want: header("X-Header-Set-1", "header-set-1", "X-Header-Set-2", "header-set-2",
		"X-Header-Add-1", "header-add-1", "X-Header-Add-2", "add-val-2", "X-Header-Add-2", "header-add-2",
		"X-Header-Add-3", "header-add-3", "Another-Header", "another-header-val"),
}, {
	name:   "names are case-insensitive on both sides",
	filter: caseInsensitive,
	// net/http canonicalises the lowercase names a client or backend sends.
	in: header("x-header-set", "original-val-set", "x-header-add", "original-val-add",
		"x-header-remove", "original-val-remove", "Another-Header", "another-header-val"),
	want: header("X-Header-Set", "header-set", "X-Header-Add", "original-val-add", "X-Header-Add", "header-add",
		"X-Lowercase-Add", "lowercase-add", "X-Mixedcase-Add-1", "mixedcase-add-1",
		"X-Uppercase-Add", "uppercase-add", "Another-Header", "another-header-val"),
}, {
	name:   "into an empty header",
	filter: multiple,
	in:     http.Header{},
	want: header("X-Header-Set-1", "header-set-1", "X-Header-Set-2", "header-set-2",
		"X-Header-Add-1", "header-add-1", "X-Header-Add-2", "header-add-2", "X-Header-Add-3", "header-add-3"),
}}

func TestModifyRequestHeaders(t *testing.T) {
	for _, tc := range headerCases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, requestHeaders(tc.filter))
			out := request("http://gw.example/set")
			out.Header = tc.in.Clone()
			c.ModifyRequest(out, "/set")
			if !reflect.DeepEqual(out.Header, tc.want) {
				t.Errorf("header = %v, want %v", out.Header, tc.want)
			}
			if out.Host != "gw.example" || out.URL.Path != "/set" {
				t.Errorf("Host, path = %q, %q; want them unchanged", out.Host, out.URL.Path)
			}
			resp := http.Header{"Untouched": {"x"}}
			if c.ModifyResponse(resp); len(resp) != 1 {
				t.Errorf("a request modifier changed the response header: %v", resp)
			}
		})
	}
}

func TestModifyResponseHeaders(t *testing.T) {
	for _, tc := range headerCases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, responseHeaders(tc.filter))
			h := tc.in.Clone()
			c.ModifyResponse(h)
			if !reflect.DeepEqual(h, tc.want) {
				t.Errorf("header = %v, want %v", h, tc.want)
			}
			out := request("http://gw.example/set", "Untouched", "x")
			if c.ModifyRequest(out, "/set"); len(out.Header) != 1 {
				t.Errorf("a response modifier changed the request header: %v", out.Header)
			}
		})
	}
}

// TestRequestAndResponseModifiers is the conformance route
// /response-and-request-header-modifiers: both filters on one rule act independently.
func TestRequestAndResponseModifiers(t *testing.T) {
	c := mustCompile(t,
		responseHeaders(gatewayv1.HTTPHeaderFilter{
			Set:    headers("X-Header-Set-1", "header-set-1", "X-Header-Set-2", "header-set-2"),
			Add:    headers("X-Header-Add-1", "header-add-1", "X-Header-Add-2", "header-add-2"),
			Remove: []string{"X-Header-Remove-1", "X-Header-Remove-2"},
		}),
		requestHeaders(gatewayv1.HTTPHeaderFilter{
			Set:    headers("X-Header-Set", "set-overwrites-values"),
			Add:    headers("X-Header-Add", "header-val-1", "X-Header-Add-Append", "header-val-2"),
			Remove: []string{"X-Header-Remove"},
		}))
	out := request("http://gw.example/response-and-request-header-modifiers",
		"X-Header-Remove", "remove-val", "X-Header-Add-Append", "append-val-1", "X-Header-Echo", "echo")
	c.ModifyRequest(out, "/response-and-request-header-modifiers")
	wantReq := header("X-Header-Add", "header-val-1", "X-Header-Set", "set-overwrites-values",
		"X-Header-Add-Append", "append-val-1", "X-Header-Add-Append", "header-val-2", "X-Header-Echo", "echo")
	if !reflect.DeepEqual(out.Header, wantReq) {
		t.Errorf("request header = %v, want %v", out.Header, wantReq)
	}
	resp := header("X-Header-Set-2", "set-val-2", "X-Header-Add-2", "add-val-2", "X-Header-Remove-2", "remove-val-2",
		"Another-Header", "another-header-val", "X-Header-Remove-1", "remove-val-1", "X-Header-Echo", "echo")
	c.ModifyResponse(resp)
	wantResp := header("X-Header-Set-1", "header-set-1", "X-Header-Set-2", "header-set-2",
		"X-Header-Add-1", "header-add-1", "X-Header-Add-2", "add-val-2", "X-Header-Add-2", "header-add-2",
		"Another-Header", "another-header-val", "X-Header-Echo", "echo")
	if !reflect.DeepEqual(resp, wantResp) {
		t.Errorf("response header = %v, want %v", resp, wantResp)
	}
}

func TestModifyRequestNilHeader(t *testing.T) {
	c := mustCompile(t, requestHeaders(gatewayv1.HTTPHeaderFilter{Add: headers("X-A", "1")}))
	out := request("http://gw.example/")
	out.Header = nil
	c.ModifyRequest(out, "/")
	if got := out.Header.Get("X-A"); got != "1" {
		t.Errorf("X-A = %q, want 1", got)
	}
}
