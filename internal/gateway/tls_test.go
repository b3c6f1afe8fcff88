package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// tlsAnswer is what an HTTPS request through the gateway got: the status (0 when the
// connection or handshake failed), the protocol, the connection's TLS state and the
// echoed request.
type tlsAnswer struct {
	status, protoMajor int
	tls                *tls.ConnectionState
	location           string
	echo               echoed
	err                error
}

// tlsClient is a client whose connections are TLS connections for serverName, trusting
// roots and resuming sessions from sessions when it can, HTTP/2 if the server offers it;
// each request opens a connection of its own unless keepAlive.
func tlsClient(t *testing.T, serverName string, roots *x509.CertPool, sessions tls.ClientSessionCache, keepAlive bool) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{ServerName: serverName, RootCAs: roots, ClientSessionCache: sessions},
		ForceAttemptHTTP2: true,
		DisableKeepAlives: !keepAlive,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// sendTLS sends GET path with Host host to addr through client.
func sendTLS(client *http.Client, addr, host, path string) tlsAnswer {
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return tlsAnswer{err: err}
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return tlsAnswer{err: err}
	}
	defer resp.Body.Close()
	a := tlsAnswer{status: resp.StatusCode, protoMajor: resp.ProtoMajor, tls: resp.TLS, location: resp.Header.Get("Location")}
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &a.echo)
	return a
}

// presents reports whether the connection's server certificate is the leaf of secret.
func presents(state *tls.ConnectionState, secret *corev1.Secret) bool {
	if state == nil || len(state.PeerCertificates) == 0 {
		return false
	}
	want, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	return err == nil && string(state.PeerCertificates[0].Raw) == string(want.Certificate[0])
}

// TestHTTPSListeners drives the gateway over real TLS against a real API server: a
// certificate chosen by SNI among a Gateway's HTTPS listeners, HTTP/2, routing as on
// HTTP, redirects keeping the https scheme, 421 for a host of another listener, a
// certificate in another namespace refused until a ReferenceGrant permits it (and
// again once the grant goes, resumed sessions included), and certificate renewal
// without reopening the listener.
func TestHTTPSListeners(t *testing.T) {
	const app, certs = "tls-app", "tls-certs"
	c := testenv.Start(t)
	for _, n := range []string{app, certs} {
		c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	web, _ := echoServer(t, "127.0.0.1", "web")
	webPod(t, c, app, "web", "web", web)

	site, siteRoots := testenv.TLSSecret(t, app, "site", "*.example.com")
	foreign, foreignRoots := testenv.TLSSecret(t, certs, "foreign", "foreign.example.com")
	listener := testenv.FreeAddr(t, "127.0.0.1")
	class, gw := gatewayObjects(t, app, listener)
	port := gw.Spec.Listeners[0].Port
	https := func(name, hostname, secretNamespace, secret string) gatewayv1.Listener {
		return gatewayv1.Listener{
			Name: gatewayv1.SectionName(name), Port: port, Protocol: gatewayv1.HTTPSProtocolType,
			Hostname: new(gatewayv1.Hostname(hostname)),
			TLS: &gatewayv1.ListenerTLSConfig{CertificateRefs: []gatewayv1.SecretObjectReference{{
				Name: gatewayv1.ObjectName(secret), Namespace: new(gatewayv1.Namespace(secretNamespace))}}},
		}
	}
	gw.Spec.Listeners = []gatewayv1.Listener{
		https("site", "site.example.com", app, "site"),
		https("wildcard", "*.example.com", app, "site"),
		https("foreign", "foreign.example.com", certs, "foreign"),
	}
	plain := gatewayv1.HTTPRouteRule{BackendRefs: []gatewayv1.HTTPBackendRef{backend("web", 80, 1)}}
	onListener := func(r *gatewayv1.HTTPRoute, section string) *gatewayv1.HTTPRoute {
		r.Spec.ParentRefs[0].SectionName = new(gatewayv1.SectionName(section))
		return r
	}
	c.Create(t, site, foreign, class, gw, webService(app, "web"),
		onListener(route(app, "site", "gw", "site.example.com", plain), "site"),
		onListener(route(app, "foreign", "gw", "foreign.example.com", plain), "foreign"),
		onListener(route(app, "redirect", "gw", "redirect.example.com", gatewayv1.HTTPRouteRule{
			Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestRedirect, RequestRedirect: &gatewayv1.HTTPRequestRedirectFilter{
				Hostname: new(gatewayv1.PreciseHostname("elsewhere.example"))}}}}), "wildcard"),
	)
	runGateway(t, c, gateway.Options{})

	siteClient := tlsClient(t, "site.example.com", siteRoots, nil, false)
	var a tlsAnswer
	testenv.WaitUntil(t, waitTimeout, "the HTTPS listener serves site.example.com", func() bool {
		a = sendTLS(siteClient, listener, "site.example.com", "/x")
		return a.status == http.StatusOK
	})
	t.Run("SNI picks the listener's certificate and the request is routed", func(t *testing.T) {
		if a.echo.Pod != "web" || a.echo.Path != "/x" || a.echo.Host != "site.example.com" || !presents(a.tls, site) || a.protoMajor != 2 {
			t.Errorf("answer %+v (HTTP/%d), want web's echo of /x for site.example.com over HTTP/2 with the site certificate", a.echo, a.protoMajor)
		}
		http1 := tlsClient(t, "site.example.com", siteRoots, nil, false)
		http1.Transport.(*http.Transport).ForceAttemptHTTP2 = false
		if a := sendTLS(http1, listener, "site.example.com", "/x"); a.status != http.StatusOK || a.protoMajor != 1 {
			t.Errorf("HTTP/1.1 over TLS: %d HTTP/%d %v, want 200 over HTTP/1.1", a.status, a.protoMajor, a.err)
		}
	})
	t.Run("a host of another listener is misdirected", func(t *testing.T) {
		if a := sendTLS(siteClient, listener, "other.example.com", "/"); a.status != http.StatusMisdirectedRequest {
			t.Errorf("SNI site.example.com, Host other.example.com: %d %v, want 421", a.status, a.err)
		}
	})
	t.Run("redirects keep the https scheme", func(t *testing.T) {
		want := "https://elsewhere.example:" + fmt.Sprint(port) + "/y"
		a := sendTLS(tlsClient(t, "redirect.example.com", siteRoots, nil, false), listener, "redirect.example.com", "/y")
		if a.status != http.StatusFound || a.location != want {
			t.Errorf("redirect: %d Location %q %v, want 302 %s", a.status, a.location, a.err, want)
		}
	})

	t.Run("a certificate in another namespace is refused without a ReferenceGrant", func(t *testing.T) {
		for _, roots := range []*x509.CertPool{foreignRoots, siteRoots} {
			if a := sendTLS(tlsClient(t, "foreign.example.com", roots, nil, false), listener, "foreign.example.com", "/"); a.err == nil || a.tls != nil {
				t.Fatalf("foreign.example.com without a grant: %d, TLS state %v, want the handshake to fail", a.status, a.tls != nil)
			}
		}
		grant := &gatewayv1.ReferenceGrant{
			ObjectMeta: metav1.ObjectMeta{Namespace: certs, Name: "gateways"},
			Spec: gatewayv1.ReferenceGrantSpec{
				From: []gatewayv1.ReferenceGrantFrom{{Group: gatewayv1.GroupName, Kind: "Gateway", Namespace: app}},
				To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: "Secret", Name: new(gatewayv1.ObjectName("foreign"))}},
			},
		}
		c.Create(t, grant)
		foreignClient := tlsClient(t, "foreign.example.com", foreignRoots, tls.NewLRUClientSessionCache(8), false)
		testenv.WaitUntil(t, waitTimeout, "the granted certificate is served", func() bool {
			a := sendTLS(foreignClient, listener, "foreign.example.com", "/")
			return a.status == http.StatusOK && presents(a.tls, foreign) && a.echo.Pod == "web"
		})
		if a := sendTLS(foreignClient, listener, "foreign.example.com", "/"); a.tls == nil || !a.tls.DidResume {
			t.Errorf("a second connection did not resume the session: %d %v", a.status, a.err)
		}
		// Withdrawing the grant refuses the certificate again, resumed sessions included.
		if err := c.Delete(context.Background(), grant); err != nil {
			t.Fatal(err)
		}
		testenv.WaitUntil(t, waitTimeout, "the certificate is refused once the grant is gone", func() bool {
			a := sendTLS(foreignClient, listener, "foreign.example.com", "/")
			return a.err != nil && a.tls == nil
		})
	})

	t.Run("a renewed certificate is served without reopening the listener", func(t *testing.T) {
		// A kept-alive connection survives only if the listener is never closed.
		kept := tlsClient(t, "site.example.com", siteRoots, nil, true)
		if a := sendTLS(kept, listener, "site.example.com", "/"); a.status != http.StatusOK {
			t.Fatalf("before renewal: %d %v", a.status, a.err)
		}
		renewed, renewedRoots := testenv.TLSSecret(t, app, "site", "*.example.com")
		var current corev1.Secret
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(site), &current); err != nil {
			t.Fatal(err)
		}
		current.Data = renewed.Data
		if err := c.Update(context.Background(), &current); err != nil {
			t.Fatal(err)
		}
		fresh := tlsClient(t, "site.example.com", renewedRoots, nil, false)
		testenv.WaitUntil(t, waitTimeout, "the renewed certificate is presented", func() bool {
			a := sendTLS(fresh, listener, "site.example.com", "/")
			return a.status == http.StatusOK && presents(a.tls, renewed)
		})
		if a := sendTLS(kept, listener, "site.example.com", "/"); a.status != http.StatusOK || !presents(a.tls, site) {
			t.Errorf("the connection opened before the renewal: %d %v, want it still open, with the old certificate", a.status, a.err)
		}
	})
}
