package httpfilter

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// redirect is a compiled HTTPRequestRedirectFilter.
type redirect struct {
	// scheme is "" to keep the Listener's.
	scheme string
	// hostname is "" to keep the request's.
	hostname string
	// port is 0 to derive it from the scheme or the Listener.
	port   int32
	path   pathModifier
	status int
}

func compileRedirect(f *gatewayv1.HTTPRequestRedirectFilter) (*redirect, []string) {
	rd := redirect{status: http.StatusFound}
	var problems []string
	if f.Scheme != nil {
		if rd.scheme = *f.Scheme; wellKnownPort(rd.scheme) == 0 {
			problems = append(problems, fmt.Sprintf("requestRedirect.scheme %q is not supported", rd.scheme))
		}
	}
	if f.Hostname != nil {
		if rd.hostname = string(*f.Hostname); !validHostname(rd.hostname) {
			problems = append(problems, fmt.Sprintf("requestRedirect.hostname %q is not a valid hostname", rd.hostname))
		}
	}
	if f.Port != nil {
		if rd.port = *f.Port; rd.port < 1 || rd.port > 65535 {
			problems = append(problems, fmt.Sprintf("requestRedirect.port %d is not between 1 and 65535", rd.port))
		}
	}
	if f.StatusCode != nil {
		switch rd.status = *f.StatusCode; rd.status {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
			http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		default:
			problems = append(problems, fmt.Sprintf("requestRedirect.statusCode %d is not supported", rd.status))
		}
	}
	var errs []string
	rd.path, errs = compilePath("requestRedirect", f.Path)
	if problems = append(problems, errs...); len(problems) > 0 {
		return nil, problems
	}
	return &rd, nil
}

// location builds the absolute Location that redirects r. The port is, in order: the
// filter's; the well-known port of the filter's scheme; the Listener's. It is written
// only when it is not the well-known port of the Location's scheme.
func (rd *redirect) location(r *http.Request, matchedPrefix string, listenerPort int32, listenerScheme string) string {
	scheme, port := listenerScheme, listenerPort
	if rd.scheme != "" {
		scheme, port = rd.scheme, wellKnownPort(rd.scheme)
	}
	if rd.port != 0 {
		port = rd.port
	}
	host := rd.hostname
	if host == "" {
		host = hostWithoutPort(r.Host)
	}
	u := url.URL{RawQuery: r.URL.RawQuery}
	u.Path, u.RawPath = rd.path.apply(r.URL.Path, r.URL.RawPath, matchedPrefix)
	if host == "" {
		// A request without Host (HTTP/1.0) and no hostname to send it to: a path-only
		// reference keeps the client on the same authority. A leading "//" would make it
		// name another host, so it is written as "/.//".
		loc := u.String()
		if strings.HasPrefix(loc, "//") {
			loc = "/." + loc
		}
		return loc
	}
	u.Scheme = scheme
	switch {
	case port != 0 && port != wellKnownPort(scheme):
		u.Host = net.JoinHostPort(host, strconv.Itoa(int(port)))
	case strings.Contains(host, ":"):
		u.Host = "[" + host + "]"
	default:
		u.Host = host
	}
	return u.String()
}

// wellKnownPort returns the port of scheme "http" or "https", or 0.
func wellKnownPort(scheme string) int32 {
	switch scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}

// hostWithoutPort returns the host of a Host header value, without brackets for IPv6.
func hostWithoutPort(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// preciseHostname is the PreciseHostname pattern of the Gateway API CRDs.
var preciseHostname = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// validHostname reports whether h is a PreciseHostname: a lowercase DNS name, no wildcard,
// no port.
func validHostname(h string) bool {
	return len(h) <= 253 && preciseHostname.MatchString(h)
}
