package e2e

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// gatewayReplica is a gateway process serving the Gateway's listener on host.
type gatewayReplica struct {
	*testenv.Process
	host, metrics, probes string
	args                  []string // the process's flags, for a restart

	http     *http.Client // carries the clients' connections to the replica
	inFlight sync.WaitGroup
}

// startGatewayReplica runs a further gateway replica serving the Gateway's listener on
// host until the test ends.
func (s *system) startGatewayReplica(t testing.TB, host string) *gatewayReplica {
	loopback := func() string { return testenv.FreeAddr(t, "127.0.0.1") }
	g := &gatewayReplica{host: host, metrics: loopback(), probes: loopback(), http: newHTTPClient()}
	g.args = []string{"--kubeconfig", s.kubeconfig, "--listen-host", host,
		"--ext-proc-bind-address", loopback(), "--ext-proc-namespace", ns,
		"--metrics-bind-address", g.metrics, "--health-probe-bind-address", g.probes, "--drain-timeout", "5s"}
	g.Process = testenv.Run(t, s.binary("gateway"), g.args...)
	return g
}

// ready reports whether the replica is ready: its cache has synced and its listeners are open.
func (g *gatewayReplica) ready() bool { return httpOK("http://" + g.probes + "/readyz") }

// newHTTPClient returns an HTTP client with connections of its own.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
}

// listening reports whether the replica accepts connections on the Gateway's listener.
func (g *gatewayReplica) listening() bool {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(g.host, sys.listenPort), time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// client returns an OpenAI client of the replica's listener whose requests take route.
func (g *gatewayReplica) client(route string) openai.Client {
	return sys.clientOn(g.host, route, option.WithHTTPClient(g.http))
}

// done marks the end of a request that rotation.pick sent to the replica.
func (g *gatewayReplica) done() { g.inFlight.Done() }
