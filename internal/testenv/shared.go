package testenv

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// shared is the control plane the tests of one test process share: started by the
// first call to Shared, stopped by RunMain once the tests ran.
var shared struct {
	mu      sync.Mutex
	main    bool // RunMain runs the tests, so it will stop the cluster
	started bool // the first start was attempted; cluster and err hold its outcome
	stopped bool // RunMain stopped the cluster; Shared must not start another
	cluster *Cluster
	err     error
}

// RunMain runs the tests of m and then stops the control plane Shared started for them,
// if any, and returns the exit code for os.Exit. A package whose tests call Shared runs
// them through it from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m)) }
//
// A failure to stop the control plane is reported on stderr and fails the run.
//
// A test that panics ends the test process before RunMain returns: the shared
// kube-apiserver and etcd are then left running, as they are when the process is killed.
func RunMain(m *testing.M) int {
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.stopped = true
	if shared.cluster != nil {
		if err := shared.cluster.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop the shared control plane: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.cluster = nil
	}
	return code
}

// Shared returns the control plane shared by the tests of the test process, with
// Switchboard's and the Gateway API's CRDs, starting it on first use; it keeps running
// from test to test until RunMain, which the package's TestMain must run the tests
// through, stops it. Shared fails t without RunMain, or when the control plane did not
// start; after a failed start every later call fails at once with the same error.
//
// Starting a control plane once per package instead of once per test (Start) saves
// seconds per test, but what a test leaves behind stays for the tests after it: tests
// sharing a cluster must each work in namespaces of their own (envtest runs no
// namespace controller, so deleting a namespace does not delete its objects) and must
// not depend on cluster-scoped state another test may change. Controllers a test runs,
// through RunManager for instance, watch the whole cluster and so also see the objects
// earlier tests left in their namespaces.
//
// Shared is safe for concurrent use, but whether tests sharing a cluster may run in
// parallel is up to them.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	c, err := sharedCluster()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sharedCluster returns the shared control plane, starting it on first use.
func sharedCluster() (*Cluster, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	switch {
	case !shared.main:
		return nil, errors.New("testenv.Shared: run the package's tests through testenv.RunMain from TestMain, which stops the shared control plane")
	case shared.stopped:
		return nil, errors.New("testenv.Shared: the tests have ended and the shared control plane has stopped")
	case !shared.started:
		shared.started = true
		shared.cluster, shared.err = start()
	}
	return shared.cluster, shared.err
}
