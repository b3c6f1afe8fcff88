package podrunner

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/switchboard-llm/switchboard/internal/podrunner/ipam"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// kubelet is a runner's kubelet endpoint in a test, with pod ns/p (containers c and d)
// bound to the runner's node.
type kubelet struct {
	r      *Runner
	pod    *corev1.Pod
	url    string // of the endpoint
	client *http.Client
	stop   func() // stops the endpoint and waits for it
}

// startKubelet serves the kubelet endpoint of a runner with opts (and a state
// directory of the test) on a free loopback port until the test ends; mutate can
// change its TLS client configuration.
func startKubelet(t *testing.T, opts Options, mutate func(*tls.Config)) *kubelet {
	t.Helper()
	opts.NodeName, opts.StateDir, opts.KubeletAddr = "node", t.TempDir(), "127.0.0.1:0"
	bound := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "0b7a2f4e-1c3d-4e5f-8a9b-0c1d2e3f4a5b"},
		Spec:       corev1.PodSpec{NodeName: "node", Containers: []corev1.Container{{Name: "c"}, {Name: "d"}}},
	}
	if err := bound.Add(pod); err != nil {
		t.Fatal(err)
	}
	r := &Runner{opts: opts, runs: map[string]*podRun{}, bound: bound}
	r.ready.Store(true)
	if err := os.MkdirAll(r.podDir(pod), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, addr, err := r.listenKubelet()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var serving sync.WaitGroup
	serving.Go(func() { r.serveKubelet(ctx, ln) })
	cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the endpoint's certificate is self-signed
	if mutate != nil {
		mutate(cfg)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			serving.Wait()
			client.CloseIdleConnections()
		})
	}
	t.Cleanup(stop)
	return &kubelet{r: r, pod: pod, url: "https://" + addr.String(), client: client, stop: stop}
}

// writeLog writes lines of stdout, a second apart from t0, as the log at path.
func writeLog(t *testing.T, path string, t0 time.Time, lines ...string) {
	t.Helper()
	var b []byte
	for i, text := range lines {
		b = appendLogLine(b, t0.Add(time.Duration(i)*time.Second), "stdout", false, []byte(text))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// get sends GET path to k and returns the status and body.
func (k *kubelet) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := k.client.Get(k.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestContainerLogsAnswersAsKubelet(t *testing.T) {
	k := startKubelet(t, Options{}, nil)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	path := logPath(k.r.podDir(k.pod), "c")
	writeLog(t, path, t0, "one", "two")
	writeLog(t, previousLog(path), t0.Add(-time.Hour), "earlier")

	for _, tc := range []struct {
		path   string
		status int
		body   string // the body, or what an error's contains
	}{
		{"/containerLogs/ns/p/c", http.StatusOK, "one\ntwo\n"},
		{"/containerLogs/ns/p/c?tailLines=1&timestamps=true", http.StatusOK, "2026-01-01T00:00:01Z two\n"},
		{"/containerLogs/ns/p/c?sinceTime=2026-01-01T00:00:01Z", http.StatusOK, "two\n"},
		{"/containerLogs/ns/p/c?limitBytes=6", http.StatusOK, "one\ntw"},
		{"/containerLogs/ns/p/c?previous=true", http.StatusOK, "earlier\n"},
		{"/containerLogs/ns/p/c?follow=true", http.StatusOK, "one\ntwo\n"}, // not running: nothing to follow
		{"/containerLogs/ns/other/c", http.StatusNotFound, "pod ns/other does not exist on node node"},
		{"/containerLogs/ns/p/nope", http.StatusNotFound, `container "nope" not found in pod ns/p`},
		{"/containerLogs/ns/p/d", http.StatusBadRequest, `container "d" in pod ns/p is waiting to start`},
		{"/containerLogs/ns/p/d?previous=1", http.StatusBadRequest, `previous terminated container "d" in pod ns/p not found`},
		{"/containerLogs/ns/p/c?tailLines=-1", http.StatusBadRequest, "tailLines: must be at least 0"},
		{"/containerLogs/ns/p/c?limitBytes=0", http.StatusBadRequest, "limitBytes: must be at least 1"},
		{"/containerLogs/ns/p/c?follow=maybe", http.StatusBadRequest, "follow: "},
		{"/containerLogs/ns/p/c?sinceTime=yesterday", http.StatusBadRequest, "sinceTime: "},
		{"/containerLogs/ns/p/c?sinceSeconds=5&sinceTime=2026-01-01T00:00:01Z", http.StatusBadRequest, "exclusive"},
		{"/containerLogs/ns/p/c?stream=Both", http.StatusBadRequest, `stream: "Both"`},
		{"/pods", http.StatusNotFound, "404 page not found"},
	} {
		status, body := k.get(t, tc.path)
		if status != tc.status || (status == http.StatusOK && body != tc.body) || !strings.Contains(body, tc.body) {
			t.Errorf("GET %s = %d %q, want %d %q", tc.path, status, body, tc.status, tc.body)
		}
	}
	resp, err := k.client.Post(k.url+"/containerLogs/ns/p/c", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST = %d, want 405", resp.StatusCode)
	}
}

func TestContainerLogsWaitForTheRunnerToBeReady(t *testing.T) {
	k := startKubelet(t, Options{}, nil)
	k.r.ready.Store(false)
	if status, body := k.get(t, "/containerLogs/ns/p/c"); status != http.StatusServiceUnavailable {
		t.Errorf("GET before the runner is ready = %d %q, want 503", status, body)
	}
}

// running makes container c of k's pod run with a fresh log and returns the log.
func (k *kubelet) running(t *testing.T) *containerLog {
	t.Helper()
	l, err := createLog(logPath(k.r.podDir(k.pod), "c"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	run := &podRun{pod: k.pod, logs: make([]atomic.Pointer[containerLog], len(k.pod.Spec.Containers))}
	run.logs[0].Store(l)
	k.r.mu.Lock()
	k.r.runs["ns/p"] = run
	k.r.mu.Unlock()
	return l
}

// followC starts following container c's log and returns its lines.
func (k *kubelet) followC(t *testing.T) *bufio.Reader {
	t.Helper()
	resp, err := k.client.Get(k.url + "/containerLogs/ns/p/c?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET follow = %d", resp.StatusCode)
	}
	return bufio.NewReader(resp.Body)
}

// readLine reads a line from r.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read a followed line: %v (got %q)", err, line)
	}
	return line
}

// ends checks that r ends with no more data.
func ends(t *testing.T, r *bufio.Reader, what string) {
	t.Helper()
	if rest, err := io.ReadAll(r); err != nil || len(rest) > 0 {
		t.Errorf("after %s the followed log went on with %q, %v; want its end", what, rest, err)
	}
}

func TestFollowingARunningContainerEndsWhenItStops(t *testing.T) {
	k := startKubelet(t, Options{}, nil)
	l := k.running(t)
	l.write(appendLogLine(nil, time.Now(), "stdout", false, []byte("hello")))
	lines := k.followC(t)
	if got := readLine(t, lines); got != "hello\n" {
		t.Errorf("first line = %q, want hello", got)
	}
	l.write(appendLogLine(nil, time.Now(), "stderr", false, []byte("world")))
	if got := readLine(t, lines); got != "world\n" {
		t.Errorf("next line = %q, want world", got)
	}
	l.close()
	ends(t, lines, "the container stopped")
}

func TestFollowingEndsWhenTheRunnerStops(t *testing.T) {
	k := startKubelet(t, Options{}, nil)
	k.running(t).write(appendLogLine(nil, time.Now(), "stdout", false, []byte("hello")))
	lines := k.followC(t)
	readLine(t, lines)
	k.stop()
	ends(t, lines, "the runner stopped")
}

func TestKubeletCertificateNamesTheBoundIPAndNode(t *testing.T) {
	var peer *x509.Certificate
	k := startKubelet(t, Options{}, func(cfg *tls.Config) {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			peer = cs.PeerCertificates[0]
			return nil
		}
	})
	k.get(t, "/containerLogs/ns/p/c")
	if peer == nil {
		t.Fatal("no peer certificate")
	}
	if _, ok := peer.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("key %T, want ECDSA", peer.PublicKey)
	}
	roots := x509.NewCertPool()
	roots.AddCert(peer)
	for _, name := range []string{"127.0.0.1", "node"} {
		if _, err := peer.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("the certificate does not serve %s: %v", name, err)
		}
	}
}

func TestKubeletRequiresAClientCertificateSignedByTheCA(t *testing.T) {
	ca, caKey := newCA(t)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	var clientCert tls.Certificate
	k := startKubelet(t, Options{KubeletClientCAs: pool}, func(cfg *tls.Config) {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &clientCert, nil }
	})
	if _, err := k.client.Get(k.url + "/containerLogs/ns/p/c"); err == nil {
		t.Error("a client without a certificate was served")
	}
	clientCert = signedClientCert(t, ca, caKey)
	if status, body := k.get(t, "/containerLogs/ns/other/c"); status != http.StatusNotFound {
		t.Errorf("GET with a client certificate = %d %q, want 404 from the handler", status, body)
	}
}

// newCA returns a self-signed CA certificate and its key.
func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	ca, key, _ := testenv.Certificate(t, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubelet-client-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}, nil, nil)
	return ca, key
}

// signedClientCert returns a client certificate that ca signed.
func signedClientCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey) tls.Certificate {
	_, key, der := testenv.Certificate(t, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestKubeletAddressMustBeAnIP(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:10250": true, ":0": true, "[::1]:0": true, "localhost:10250": false, "127.0.0.1": false} {
		if _, err := parseKubeletAddr(addr); (err == nil) != ok {
			t.Errorf("parseKubeletAddr(%q) = %v, want ok %v", addr, err, ok)
		}
	}
	pool, err := ipam.NewPool(podIPRange)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{NodeName: "n", PodIPs: pool, BinDir: "bin", StateDir: "state", KubeletAddr: "localhost:10250"}
	if _, err := New(fake.NewClientset(), opts); err == nil || !strings.Contains(err.Error(), "the host must be an IP address") {
		t.Errorf("New with a kubelet address by name = %v, want it rejected", err)
	}
}
