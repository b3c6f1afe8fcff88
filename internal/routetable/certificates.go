package routetable

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Certificate is what a Secret named by a listener's tls.certificateRefs holds for TLS
// termination.
type Certificate struct {
	// TLS is the Secret's certificate chain and private key, with Leaf set; nil when the
	// Secret holds none the gateway can use. It is shared by every reader and MUST NOT
	// be modified.
	TLS *tls.Certificate
	// Invalid says why TLS is nil.
	Invalid error
}

// ParseCertificate returns the certificate secret holds: a Secret of type
// kubernetes.io/tls whose tls.crt is a PEM certificate chain, leaf first, and whose
// tls.key is the PEM private key of that leaf. Any other Secret holds none, and Invalid
// says why, for a listener's InvalidCertificateRef condition message.
func ParseCertificate(secret *corev1.Secret) Certificate {
	invalid := func(err error) Certificate { return Certificate{Invalid: err} }
	if secret.Type != corev1.SecretTypeTLS {
		return invalid(fmt.Errorf("type %q is not %s", secret.Type, corev1.SecretTypeTLS))
	}
	crt, key := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return invalid(fmt.Errorf("%s and %s must both be set", corev1.TLSCertKey, corev1.TLSPrivateKeyKey))
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return invalid(fmt.Errorf("%s and %s are not a PEM certificate chain and its private key: %w", corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err))
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return invalid(fmt.Errorf("%s: %w", corev1.TLSCertKey, err))
		}
	}
	return Certificate{TLS: &cert}
}

// CertificateRefs returns the Secrets that the listeners of gw name in
// tls.certificateRefs (references of group "" and kind Secret; others name no Secret),
// each once, in spec order. Whether a ReferenceGrant permits a reference is not
// considered: these are the Secrets whose certificates Build may ask Input.Certificate
// for.
func CertificateRefs(gw *gatewayv1.Gateway) []types.NamespacedName {
	var out []types.NamespacedName
	seen := map[types.NamespacedName]bool{}
	for _, l := range gw.Spec.Listeners {
		if l.TLS == nil {
			continue
		}
		for _, ref := range l.TLS.CertificateRefs {
			if ref.Group != nil && *ref.Group != "" || ref.Kind != nil && *ref.Kind != "Secret" {
				continue
			}
			key := types.NamespacedName{Namespace: gw.Namespace, Name: string(ref.Name)}
			if ref.Namespace != nil {
				key.Namespace = string(*ref.Namespace)
			}
			if !seen[key] {
				seen[key] = true
				out = append(out, key)
			}
		}
	}
	return out
}

// Certificates returns the certificates of the HTTPS listener on addr that owns
// serverName, the TLS server name (SNI) a client asked for: as for a request's host,
// the listener whose hostname matches it most specifically, a listener without hostname
// matching every name and a missing one. It returns nil when no listener owns the name
// or the owner has no usable certificate: the handshake must then fail, rather than
// present another listener's certificate. The slice is shared and MUST NOT be modified.
func (t *Table) Certificates(addr Addr, serverName string) []*tls.Certificate {
	if t == nil {
		return nil
	}
	ar := t.byAddr[addr]
	if ar == nil {
		return nil
	}
	if g := ar.owner(strings.TrimSuffix(serverName, ".")); g != nil {
		return g.certs
	}
	return nil
}

// Misdirected reports whether a request for host (a Host header value, port allowed)
// arriving over a TLS connection to addr opened for serverName belongs to another
// listener than the one that owns serverName, whose certificate the connection
// presented. Gateway API lets the gateway answer such a request 421 Misdirected
// Request, so that the client retries on a connection of its own, instead of serving it
// under the wrong listener's certificate.
func (t *Table) Misdirected(addr Addr, serverName, host string) bool {
	if t == nil || !addr.TLS {
		return false
	}
	ar := t.byAddr[addr]
	if ar == nil {
		return false
	}
	return ar.owner(strings.TrimSuffix(serverName, ".")) != ar.owner(requestHost(host))
}

// owner returns the listener group whose hostname matches host most specifically, or
// nil when none does.
func (ar *addrRoutes) owner(host string) *listenerGroup {
	for i := range ar.groups {
		if ar.groups[i].host.matches(host) {
			return &ar.groups[i]
		}
	}
	return nil
}
