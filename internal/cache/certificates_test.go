package cache

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/scheme"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// countingReader counts the Gets of the reader it wraps.
type countingReader struct {
	client.Reader
	gets atomic.Int64
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets.Add(1)
	return r.Reader.Get(ctx, key, obj, opts...)
}

// certificateGateway is a Gateway ns/name of class whose HTTPS listener names the
// Secrets secrets.
func certificateGateway(name, class string, secrets ...string) *gatewayv1.Gateway {
	var refs []gatewayv1.SecretObjectReference
	for _, s := range secrets {
		refs = append(refs, gatewayv1.SecretObjectReference{Name: gatewayv1.ObjectName(s)})
	}
	return &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(class), Listeners: []gatewayv1.Listener{{
			Name: "https", Port: 443, Protocol: gatewayv1.HTTPSProtocolType,
			TLS: &gatewayv1.ListenerTLSConfig{CertificateRefs: refs},
		}}},
	}
}

// TestCertificateFeed checks that the feed keeps the certificates of the Secrets
// Switchboard's Gateways name and of no other Secret, reads a Secret's data once per
// resourceVersion, and forgets a Secret no Gateway names any more.
func TestCertificateFeed(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	ours := &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "ours"}, Spec: gatewayv1.GatewayClassSpec{ControllerName: routetable.ControllerName}}
	theirs := &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}, Spec: gatewayv1.GatewayClassSpec{ControllerName: "example.com/other"}}
	secret := func(name string) *corev1.Secret {
		sec, _ := testenv.TLSSecret(t, "ns", name, "example.com")
		return sec
	}
	malformed := secret("malformed")
	malformed.Data[corev1.TLSCertKey] = []byte("Hello world\n")
	k := fake.NewClientBuilder().WithScheme(s).
		WithIndex(&gatewayv1.Gateway{}, certificateRefsIndex, func(o client.Object) []string {
			var keys []string
			for _, key := range routetable.CertificateRefs(o.(*gatewayv1.Gateway)) {
				keys = append(keys, key.String())
			}
			return keys
		}).
		WithObjects(ours, theirs,
			certificateGateway("gw", "ours", "named", "malformed", "missing"),
			certificateGateway("foreign", "theirs", "foreign-only"),
			certificateGateway("classless", "nonexistent", "classless-only"),
			secret("named"), malformed, secret("unnamed"), secret("foreign-only"), secret("classless-only")).
		Build()
	store := new(Store[routetable.Certificate])
	api := &countingReader{Reader: k}
	f := newCertificateFeed(store)
	f.cache, f.api = k, api
	ctx := context.Background()
	reconcileAll := func() {
		t.Helper()
		for _, name := range []string{"named", "malformed", "missing", "unnamed", "foreign-only", "classless-only"} {
			if _, err := f.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}); err != nil {
				t.Fatalf("reconcile %s: %v", name, err)
			}
		}
	}
	stored := func() []string {
		var names []string
		for _, key := range []string{"named", "malformed", "missing", "unnamed", "foreign-only", "classless-only"} {
			if _, ok := store.Get(types.NamespacedName{Namespace: "ns", Name: key}); ok {
				names = append(names, key)
			}
		}
		return names
	}
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

	reconcileAll()
	if got := stored(); !slices.Equal(got, []string{"named", "malformed"}) {
		t.Fatalf("Secrets stored: %v, want only those a Gateway of Switchboard's class names and that exist", got)
	}
	if c, _ := store.Get(key("named")); c.TLS == nil || c.TLS.Leaf.Subject.CommonName != "named" {
		t.Errorf("named Secret: %+v, want its certificate", c)
	}
	if c, _ := store.Get(key("malformed")); c.TLS != nil || c.Invalid == nil {
		t.Errorf("malformed Secret: %+v, want no certificate and why", c)
	}
	reads := api.gets.Load()
	reconcileAll()
	if api.gets.Load() != reads {
		t.Errorf("unchanged Secrets read again: %d reads, then %d", reads, api.gets.Load())
	}

	// A new certificate in the Secret replaces the stored one.
	renewed := secret("named")
	var current corev1.Secret
	if err := k.Get(ctx, key("named"), &current); err != nil {
		t.Fatal(err)
	}
	current.Data = renewed.Data
	if err := k.Update(ctx, &current); err != nil {
		t.Fatal(err)
	}
	reconcileAll()
	if c, _ := store.Get(key("named")); c.TLS == nil || string(c.TLS.Certificate[0]) != string(routetable.ParseCertificate(renewed).TLS.Certificate[0]) {
		t.Error("the renewed certificate is not stored")
	}

	// The Gateways change what they name: Secrets named no more are forgotten; a Secret
	// a Gateway moved to Switchboard's class names is read.
	if got := f.classSecrets(ctx, ours); len(got) != 3 {
		t.Errorf("requests for the Secrets of class ours: %v, want the 3 its Gateway names", got)
	}
	for name, change := range map[string]func(*gatewayv1.Gateway){
		"gw": func(gw *gatewayv1.Gateway) {
			gw.Spec.Listeners[0].TLS.CertificateRefs = gw.Spec.Listeners[0].TLS.CertificateRefs[:1]
		},
		"foreign": func(gw *gatewayv1.Gateway) { gw.Spec.GatewayClassName = "ours" },
	} {
		var gw gatewayv1.Gateway
		if err := k.Get(ctx, key(name), &gw); err != nil {
			t.Fatal(err)
		}
		change(&gw)
		if err := k.Update(ctx, &gw); err != nil {
			t.Fatal(err)
		}
	}
	reconcileAll()
	if got := stored(); !slices.Equal(got, []string{"named", "foreign-only"}) {
		t.Errorf("Secrets stored after the Gateways changed: %v, want named and foreign-only", got)
	}
	if err := k.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "named"}}); err != nil {
		t.Fatal(err)
	}
	reconcileAll()
	if got := stored(); !slices.Equal(got, []string{"foreign-only"}) {
		t.Errorf("Secrets stored after one was deleted: %v, want foreign-only", got)
	}
}

func TestSecretRequests(t *testing.T) {
	gw := certificateGateway("gw", "ours", "a", "b", "a")
	got := secretRequests(gw)
	want := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}}, {NamespacedName: types.NamespacedName{Namespace: "ns", Name: "b"}}}
	if !slices.Equal(got, want) {
		t.Errorf("secretRequests = %v, want %v", got, want)
	}
}
