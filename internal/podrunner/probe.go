package podrunner

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// portPollInterval is the time between two checks of a container's ports when it has
// no readiness probe.
const portPollInterval = 100 * time.Millisecond

// watchReadiness keeps container i's ready flag up to date until ctx ends: by its
// readinessProbe (httpGet or tcpSocket) if it has one, else ready once every address
// in ports accepts connections (at once if there are none).
func (p *podRun) watchReadiness(ctx context.Context, i int, c *corev1.Container, ports []string) {
	setReady := func(ready bool) { p.setContainer(i, func(s *containerState) { s.ready = ready }) }
	if probe := c.ReadinessProbe; probe != nil && (probe.HTTPGet != nil || probe.TCPSocket != nil) {
		p.runProbe(ctx, c, probe, setReady)
		return
	}
	for {
		all := true
		for _, addr := range ports {
			if !accepts(ctx, addr) {
				all = false
				break
			}
		}
		if all {
			setReady(true)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(portPollInterval):
		}
	}
}

// runProbe runs probe against the pod IP every period after the initial delay,
// calling setReady when the result crosses the success or failure threshold, until
// ctx ends.
func (p *podRun) runProbe(ctx context.Context, c *corev1.Container, probe *corev1.Probe, setReady func(bool)) {
	period := seconds(probe.PeriodSeconds, 10)
	timeout := seconds(probe.TimeoutSeconds, 1)
	successes, failures := int(max(probe.SuccessThreshold, 1)), int(probe.FailureThreshold)
	if failures <= 0 {
		failures = 3
	}
	transport := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // kubelet does not verify probes either
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	delay := time.Duration(probe.InitialDelaySeconds) * time.Second
	ready, streak := false, 0 // streak counts results that disagree with ready
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = period
		ok := p.probeOnce(ctx, client, c, probe, timeout)
		if ok == ready {
			streak = 0
			continue
		}
		streak++
		if (ok && streak >= successes) || (!ok && streak >= failures) {
			ready, streak = ok, 0
			setReady(ready)
		}
	}
}

// probeOnce runs probe once and reports whether it succeeded: an HTTP status from 200
// to 399, or a TCP connection.
func (p *podRun) probeOnce(ctx context.Context, client *http.Client, c *corev1.Container, probe *corev1.Probe, timeout time.Duration) bool {
	ip := p.snapshot().ip.String()
	if probe.TCPSocket != nil {
		port, err := containerPort(c, probe.TCPSocket.Port)
		if err != nil {
			return false
		}
		host := probe.TCPSocket.Host
		if host == "" {
			host = ip
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return accepts(ctx, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	get := probe.HTTPGet
	port, err := containerPort(c, get.Port)
	if err != nil {
		return false
	}
	host := get.Host
	if host == "" {
		host = ip
	}
	scheme := strings.ToLower(string(get.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := get.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+path, nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "kube-probe/pod-runner")
	for _, h := range get.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
		} else {
			req.Header.Add(h.Name, h.Value)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// containerPort resolves a probe's port, a number or the name of one of c's ports.
func containerPort(c *corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
}

// seconds returns n seconds, or def seconds if n is not positive.
func seconds(n, def int32) time.Duration {
	if n <= 0 {
		n = def
	}
	return time.Duration(n) * time.Second
}
