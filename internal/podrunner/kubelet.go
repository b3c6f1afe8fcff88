package podrunner

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// The kubelet endpoint is the part of kubelet's HTTPS API the API server needs from the
// runner: GET /containerLogs/{namespace}/{pod}/{container}, which serves the pods/log
// subresource. It has no authentication or authorisation of its own unless
// Options.KubeletClientCAs is set: any local process that reaches it can read the
// logs of the runner's pods.

// kubeletShutdownTimeout bounds the wait for log requests in flight when the runner
// stops.
const kubeletShutdownTimeout = 5 * time.Second

// parseKubeletAddr parses the address of the kubelet endpoint, "host:port" with host an
// IP address or empty (every address).
func parseKubeletAddr(addr string) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("kubelet address %q: %w", addr, err)
	}
	if host == "" {
		return netip.IPv4Unspecified(), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("kubelet address %q: the host must be an IP address: %w", addr, err)
	}
	return ip, nil
}

// listenKubelet listens on the kubelet endpoint's address with a fresh self-signed
// serving certificate and returns the listener with the address the Node advertises
// for it: the bound IP and port, 127.0.0.1 for an unspecified IP.
func (r *Runner) listenKubelet() (net.Listener, netip.AddrPort, error) {
	ip, err := parseKubeletAddr(r.opts.KubeletAddr)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	if ip.IsUnspecified() {
		ip = netip.MustParseAddr(hostIP)
	}
	cert, err := servingCertificate(ip, r.opts.NodeName)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if r.opts.KubeletClientCAs != nil {
		cfg.ClientCAs, cfg.ClientAuth = r.opts.KubeletClientCAs, tls.RequireAndVerifyClientCert
	}
	ln, err := net.Listen("tcp", r.opts.KubeletAddr)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	return tls.NewListener(ln, cfg), netip.AddrPortFrom(ip, port), nil
}

// servingCertificate returns a self-signed ECDSA certificate for ip and name, valid for
// a year.
func servingCertificate(ip netip.Addr, name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		IPAddresses:  []net.IP{ip.AsSlice()},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// serveKubelet serves the kubelet endpoint on ln until ctx ends. Requests end with ctx
// too: logs that are followed stop.
func (r *Runner) serveKubelet(ctx context.Context, ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", r.serveContainerLogs)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kubeletShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			_ = srv.Close()
		}
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		log.FromContext(ctx).Error(err, "serve the kubelet endpoint")
	}
	<-stopped
}

// serveContainerLogs answers GET /containerLogs/{namespace}/{pod}/{container} as
// kubelet does, for the pods bound to the node, with the query parameters of
// corev1.PodLogOptions.
func (r *Runner) serveContainerLogs(w http.ResponseWriter, req *http.Request) {
	ns, name, container := req.PathValue("namespace"), req.PathValue("pod"), req.PathValue("container")
	opts, err := parseLogOptions(req.URL.Query())
	if err != nil {
		http.Error(w, "invalid query: "+err.Error(), http.StatusBadRequest)
		return
	}
	if !r.ready.Load() {
		http.Error(w, "the pod runner is not running pods yet", http.StatusServiceUnavailable)
		return
	}
	pod := r.boundPod(ns + "/" + name)
	if pod == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s does not exist on node %s", ns, name, r.opts.NodeName), http.StatusNotFound)
		return
	}
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == container })
	if i < 0 {
		http.Error(w, fmt.Sprintf("container %q not found in pod %s/%s", container, ns, name), http.StatusNotFound)
		return
	}
	f, live, err := r.openLog(pod, i, opts)
	switch {
	case errors.Is(err, fs.ErrNotExist) && opts.Previous:
		http.Error(w, fmt.Sprintf("previous terminated container %q in pod %s/%s not found", container, ns, name), http.StatusBadRequest)
		return
	case errors.Is(err, fs.ErrNotExist):
		http.Error(w, fmt.Sprintf("container %q in pod %s/%s is waiting to start", container, ns, name), http.StatusBadRequest)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := printLog(req.Context(), w, f, opts, live); err != nil {
		log.FromContext(req.Context()).V(1).Info("container log request ended", "pod", ns+"/"+name, "container", container, "reason", err.Error())
	}
}

// openLog opens the log of container i of pod, the previous run's if opts.Previous,
// and returns it with the log being written to if opts.Follow and the container is
// running.
func (r *Runner) openLog(pod *corev1.Pod, i int, opts *corev1.PodLogOptions) (*os.File, *containerLog, error) {
	path := logPath(r.podDir(pod), pod.Spec.Containers[i].Name)
	if opts.Previous {
		f, err := os.Open(previousLog(path))
		return f, nil, err
	}
	if opts.Follow {
		if live := r.currentLog(pod, i); live != nil {
			if f, err := live.openLive(); f != nil || err != nil {
				return f, live, err
			}
		}
	}
	f, err := os.Open(path)
	return f, nil, err
}

// currentLog returns the log of the current or last run of container i of pod, nil if
// the runner does not run pod or the container has not started.
func (r *Runner) currentLog(pod *corev1.Pod, i int) *containerLog {
	r.mu.Lock()
	run := r.runs[pod.Namespace+"/"+pod.Name]
	r.mu.Unlock()
	if run == nil || run.pod.UID != pod.UID {
		return nil
	}
	return run.logs[i].Load()
}

// parseLogOptions parses and validates the query of a container log request, as kubelet
// does; Container is not part of it.
func parseLogOptions(q url.Values) (*corev1.PodLogOptions, error) {
	opts := &corev1.PodLogOptions{}
	var errs []error
	flag := func(name string, dst *bool) {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			errs = append(errs, paramError(name, err))
			*dst = b
		}
	}
	number := func(name string, dst **int64, least int64) {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil && n < least {
				err = fmt.Errorf("must be at least %d", least)
			}
			errs = append(errs, paramError(name, err))
			*dst = &n
		}
	}
	flag("follow", &opts.Follow)
	flag("previous", &opts.Previous)
	flag("timestamps", &opts.Timestamps)
	number("tailLines", &opts.TailLines, 0)
	number("limitBytes", &opts.LimitBytes, 1)
	number("sinceSeconds", &opts.SinceSeconds, 1)
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		errs = append(errs, paramError("sinceTime", err))
		opts.SinceTime = &metav1.Time{Time: t}
	}
	if opts.SinceSeconds != nil && opts.SinceTime != nil {
		errs = append(errs, errors.New("sinceSeconds and sinceTime are exclusive"))
	}
	if v := q.Get("stream"); v != "" {
		if v != corev1.LogStreamAll && v != corev1.LogStreamStdout && v != corev1.LogStreamStderr {
			errs = append(errs, fmt.Errorf("stream: %q is not All, Stdout or Stderr", v))
		}
		opts.Stream = &v
	}
	return opts, errors.Join(errs...)
}

// paramError names the query parameter of err, if any.
func paramError(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}
