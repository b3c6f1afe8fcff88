package httpfilter

import (
	"fmt"
	"net/http"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// rewrite is a compiled HTTPURLRewriteFilter.
type rewrite struct {
	// hostname is "" to keep the request's Host.
	hostname string
	path     pathModifier
}

func compileRewrite(f *gatewayv1.HTTPURLRewriteFilter) (*rewrite, []string) {
	var rw rewrite
	var problems []string
	if f.Hostname != nil {
		if rw.hostname = string(*f.Hostname); !validHostname(rw.hostname) {
			problems = append(problems, fmt.Sprintf("urlRewrite.hostname %q is not a valid hostname", rw.hostname))
		}
	}
	var errs []string
	rw.path, errs = compilePath("urlRewrite", f.Path)
	if problems = append(problems, errs...); len(problems) > 0 {
		return nil, problems
	}
	if rw == (rewrite{}) {
		return nil, nil
	}
	return &rw, nil
}

// apply rewrites the Host header and the path of out; the query string is kept.
func (rw *rewrite) apply(out *http.Request, matchedPrefix string) {
	if rw.hostname != "" {
		out.Host = rw.hostname
	}
	out.URL.Path, out.URL.RawPath = rw.path.apply(out.URL.Path, out.URL.RawPath, matchedPrefix)
}
