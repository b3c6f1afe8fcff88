package gatewaystatus

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// secretMetadata returns an empty metadata-only Secret, the form in which the manager's
// informer cache holds Secrets: their data never enters it.
func secretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// certificateReader reads the certificates of the Secrets that listeners of Switchboard's
// Gateways name, for the listeners' ResolvedRefs and Programmed conditions. It looks a
// Secret up in the metadata-only informer cache (meta) and reads its data through the
// uncached API reader (api) only when its resourceVersion changed since the last read,
// keeping nothing of Secrets no listener names any more.
//
// Synchronisation model: only Reconcile uses it, and the controller runs one Reconcile
// at a time (every event enqueues the same request), so it takes no lock.
type certificateReader struct {
	meta, api client.Reader
	// read holds, for each Secret named at the last read, what it held at resourceVersion.
	read map[types.NamespacedName]readCertificate
}

// readCertificate is what a Secret held at one of its resourceVersions.
type readCertificate struct {
	resourceVersion string
	cert            routetable.Certificate
}

// certificates returns what each Secret named by the tls.certificateRefs of gateways holds;
// a Secret that does not exist is absent. It fails only when a Secret cannot be read.
func (c *certificateReader) certificates(ctx context.Context, gateways []*gatewayv1.Gateway) (map[types.NamespacedName]routetable.Certificate, error) {
	out := map[types.NamespacedName]routetable.Certificate{}
	read := map[types.NamespacedName]readCertificate{}
	for _, gw := range gateways {
		for _, key := range routetable.CertificateRefs(gw) {
			if _, done := read[key]; done {
				continue
			}
			rc, found, err := c.readOne(ctx, key)
			if err != nil {
				return nil, err
			}
			if found {
				read[key], out[key] = rc, rc.cert
			}
		}
	}
	c.read = read
	return out, nil
}

// readOne returns what the Secret key holds, reusing the last read while its
// resourceVersion is unchanged, or false when it does not exist.
func (c *certificateReader) readOne(ctx context.Context, key types.NamespacedName) (readCertificate, bool, error) {
	m := secretMetadata()
	if err := c.meta.Get(ctx, key, m); err != nil {
		if apierrors.IsNotFound(err) {
			return readCertificate{}, false, nil
		}
		return readCertificate{}, false, fmt.Errorf("get secret %s metadata: %w", key, err)
	}
	if last, ok := c.read[key]; ok && last.resourceVersion == m.ResourceVersion {
		return last, true, nil
	}
	var secret corev1.Secret
	if err := c.api.Get(ctx, key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return readCertificate{}, false, nil
		}
		return readCertificate{}, false, fmt.Errorf("get secret %s: %w", key, err)
	}
	return readCertificate{resourceVersion: secret.ResourceVersion, cert: routetable.ParseCertificate(&secret)}, true, nil
}

// referencedSecret reports whether a Gateway in reader, the informer cache, names the
// Secret key in its listeners' tls.certificateRefs.
func referencedSecret(ctx context.Context, reader client.Reader, key types.NamespacedName) (bool, error) {
	var gateways gatewayv1.GatewayList
	if err := reader.List(ctx, &gateways, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("list gateways: %w", err)
	}
	for i := range gateways.Items {
		for _, ref := range routetable.CertificateRefs(&gateways.Items[i]) {
			if ref == key {
				return true, nil
			}
		}
	}
	return false, nil
}
