package gateway

import (
	"crypto/tls"
	"fmt"
	"net/http"

	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// tlsConfig returns the TLS configuration of the HTTPS listeners on addr. Each handshake
// presents a certificate of the listener that owns the client's server name (SNI), read
// from the current route table, so that certificate changes apply to the next
// handshake without reopening the address; a name no listener with a usable certificate
// owns fails the handshake. A session resumes only while the listener owning its server
// name still has a certificate, so that one that loses it (its Secret gone, its
// ReferenceGrant withdrawn) refuses resumed connections as it refuses new ones.
func (g *Gateway) tlsConfig(addr routetable.Addr) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return pickCertificate(g.Table().Certificates(addr, hello.ServerName), hello)
		},
	}
	// Tickets are sealed and opened with cfg's own keys: the server serves a clone of
	// cfg, whose keys would differ.
	cfg.WrapSession = cfg.EncryptTicket
	cfg.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		if len(g.Table().Certificates(addr, cs.ServerName)) == 0 {
			return nil, nil // no resumption; the full handshake fails
		}
		return cfg.DecryptTicket(identity, cs)
	}
	return cfg
}

// pickCertificate returns the first of a listener's certificates the client supports,
// or else its first, or fails when the listener has none.
func pickCertificate(certs []*tls.Certificate, hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if len(certs) == 0 {
		return nil, fmt.Errorf("no listener with a usable certificate serves the server name %q", hello.ServerName)
	}
	for _, c := range certs {
		if hello.SupportsCertificate(c) == nil {
			return c, nil
		}
	}
	return certs[0], nil
}

// listenerScheme is the URL scheme of the listeners on addr, for redirects that keep it.
func listenerScheme(addr routetable.Addr) string {
	if addr.TLS {
		return "https"
	}
	return "http"
}

// misdirected answers r with 421 Misdirected Request, and reports true, when it arrived
// over a TLS connection to addr opened for another listener than the one its host
// belongs to (Gateway API: the client retries on a connection of its own).
func misdirected(table *routetable.Table, addr routetable.Addr, w http.ResponseWriter, r *http.Request, o *outcome) bool {
	if r.TLS == nil || !table.Misdirected(addr, r.TLS.ServerName, r.Host) {
		return false
	}
	o.fail(w, r, &Error{Status: http.StatusMisdirectedRequest, Type: "invalid_request_error", Code: "misdirected_request",
		Message: fmt.Sprintf("The host %q is not served on a connection for %q; open a connection for it.", r.Host, r.TLS.ServerName)})
	return true
}
