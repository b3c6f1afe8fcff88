// Package testenv starts what Switchboard's integration tests run against: a real
// kube-apiserver and etcd with the project's CRDs (envtest, binaries from bin/k8s via
// KUBEBUILDER_ASSETS), kubeconfig files for processes and kubectl, the project's own
// binaries built on demand, and loopback addresses. It is imported only by tests.
package testenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/switchboard-llm/switchboard/internal/scheme"
)

// root is the repository root, found from this file's path.
var root = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}()

// Cluster is a running control plane.
type Cluster struct {
	client.Client
	// Config reaches the API server as an administrator.
	Config  *rest.Config
	env     *envtest.Environment
	certDir string
}

// Start starts a control plane with Switchboard's and the Gateway API's CRDs that stops
// when the test ends. Tests that need no control plane of their own can share one
// instead: see Shared.
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.stop() })
	return c
}

// start starts a control plane with Switchboard's and the Gateway API's CRDs; the
// caller stops it.
func start() (*Cluster, error) {
	// A certificate directory of our own survives an API server restart, so that clients
	// keep trusting the restarted server (envtest renews a directory it allocated).
	certDir, err := os.MkdirTemp("", "testenv-apiserver")
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths: []string{
			filepath.Join(root, "config", "crd", "bases"),
			filepath.Join(root, "config", "crd", "gateway-api"),
			filepath.Join(root, "config", "crd", "inference-extension"),
		},
		ErrorIfCRDPathMissing: true,
	}
	// The kube-apiserver drains long-running watches on SIGTERM for longer than tests
	// wait; past StopTimeout envtest kills it.
	env.ControlPlane.APIServer = &envtest.APIServer{CertDir: certDir, StopTimeout: 5 * time.Second}
	cfg, err := env.Start()
	if err != nil {
		_ = os.RemoveAll(certDir)
		return nil, fmt.Errorf("start envtest (run through make test, which sets KUBEBUILDER_ASSETS): %w", err)
	}
	s, err := scheme.New()
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	k, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Cluster{Client: k, Config: cfg, env: env, certDir: certDir}, nil
}

// stop stops the control plane.
func (c *Cluster) stop() error {
	err := c.env.Stop()
	_ = os.RemoveAll(c.certDir)
	return err
}

// RestartAPIServer stops the kube-apiserver (killing it if it does not stop within its
// StopTimeout, as a crash would), keeps it down for down, and starts it again on the
// same address with the same certificates; etcd and its data stay up. Clients see
// connection errors meanwhile and then reconnect.
func (c *Cluster) RestartAPIServer(t testing.TB, down time.Duration) {
	t.Helper()
	apiserver := c.env.ControlPlane.APIServer
	_ = apiserver.Stop() // an error means it was killed after StopTimeout
	addr := apiserver.SecureServing.HostPort()
	WaitUntil(t, 30*time.Second, "the old kube-apiserver releases "+addr, func() bool {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return true
		}
		conn.Close()
		return false
	})
	time.Sleep(down)
	if err := apiserver.Start(); err != nil {
		t.Fatalf("start kube-apiserver again: %v", err)
	}
}

// Kubeconfig writes a kubeconfig for an administrator named user into a temporary file
// and returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, user string) string {
	t.Helper()
	u, err := c.env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Kubectl returns the path of the kubectl built by hack/install-k8s.sh.
func Kubectl() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return filepath.Join(dir, "kubectl")
	}
	return filepath.Join(root, "bin", "k8s", "kubectl")
}

// Build builds the command in cmd/<name> into a temporary directory and returns the
// binary's path.
func Build(t testing.TB, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if err := buildTo(bin, name); err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildTo builds the command in cmd/<name> into bin.
func buildTo(bin, name string) error {
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", name, err, out)
	}
	return nil
}

// BuildCommands builds packages (such as "./cmd/gateway", or a tool of go.mod such as
// "sigs.k8s.io/gateway-api/conformance/echo-basic") with one go build, which compiles
// them in parallel, into a temporary directory, and returns the directory; each binary
// is named after its package's last path element.
func BuildCommands(t testing.TB, pkgs ...string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %v: %v\n%s", pkgs, err, out)
	}
	return dir
}

// RunControllerManager starts kube-controller-manager against the control plane that
// kubeconfig reaches, with the controllers hack/kube-controller-manager.sh runs
// (Deployments, ReplicaSets, garbage collection, namespaces, ServiceAccounts), its
// output written to out; it is killed when the test ends.
func RunControllerManager(t testing.TB, out io.Writer, kubeconfig string) *Process {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t, "127.0.0.1"))
	return RunTo(t, out, filepath.Join(root, "hack", "kube-controller-manager.sh"), kubeconfig, port)
}

// Process is a started binary.
type Process struct {
	cmd    *exec.Cmd
	exited chan error
}

// Run starts bin with args, its output on the test's stderr; it is killed when the test
// ends unless it was stopped.
func Run(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	return RunTo(t, os.Stderr, bin, args...)
}

// RunTo is Run with the process's output written to out.
func RunTo(t testing.TB, out io.Writer, bin string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &Process{cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		p.exited <- nil // let a later Stop return at once
	})
	return p
}

// Stop sends SIGTERM and returns the process's exit error, or fails t if it does not
// exit within timeout.
func (p *Process) Stop(t testing.TB, timeout time.Duration) error {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("%s did not stop within %v", p.cmd.Path, timeout)
		return nil
	}
}

// Kill sends SIGKILL, as a crash or a node failure would, and waits until the process
// has exited.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	p.exited <- <-p.exited
}

// Exited reports, without blocking, whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case err := <-p.exited:
		p.exited <- err
		return true
	default:
		return false
	}
}

// FreeAddr returns a host:port of host that was free a moment ago, on a port that no
// earlier call in this process returned. A returned port stays free only until its user
// binds it, and until then the kernel may give it to the next listener on port 0: two
// calls a moment apart returned one port to the e2e suite's Gateway listener and its
// manager's health probes, and the gateway could never bind its listener.
func FreeAddr(t testing.TB, host string) string {
	t.Helper()
	ln := listenUnclaimed(t, host)
	defer ln.Close()
	return ln.Addr().String()
}

// Listen returns a listener on a port of host that FreeAddr did not return, and that
// FreeAddr will not return: a port FreeAddr returned may still wait for its user to bind
// it. Tests of a process that uses FreeAddr listen on port 0 through it. The listener is
// closed when the test ends.
func Listen(t testing.TB, host string) net.Listener {
	t.Helper()
	ln := listenUnclaimed(t, host)
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// claimed holds the ports FreeAddr returned or Listen listens on, on any host.
var claimed struct {
	sync.Mutex
	ports map[int]bool
}

// listenUnclaimed listens on a port of host that was not claimed, and claims it.
func listenUnclaimed(t testing.TB, host string) net.Listener {
	t.Helper()
	for range 1000 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		claimed.Lock()
		taken := claimed.ports[port]
		if !taken {
			if claimed.ports == nil {
				claimed.ports = map[int]bool{}
			}
			claimed.ports[port] = true
		}
		claimed.Unlock()
		if !taken {
			return ln
		}
		ln.Close()
	}
	t.Fatalf("no port of %s is free that FreeAddr or Listen has not claimed", host)
	return nil
}

// WaitUntil polls cond every 50ms and fails t if it does not hold within timeout.
func WaitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
