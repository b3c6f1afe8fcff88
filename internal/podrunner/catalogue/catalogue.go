// Package catalogue maps container images to the local programs that stand in for them
// when the pod runner runs a pod's containers as processes, and says which ports each
// program serves. It owns no processes and reads no cluster state: the pod runner
// (package podrunner) starts the programs and publishes their ports.
package catalogue

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Repositories of the default catalogue's images.
const (
	// EchoBasic is the Gateway API conformance suite's echo server; any tag runs the
	// echo-basic binary built from sigs.k8s.io/gateway-api/conformance/echo-basic.
	EchoBasic = "registry.k8s.io/gateway-api/echo-basic"
	// EngineSim is Switchboard's vLLM-compatible engine simulator (cmd/engine-sim); any
	// tag runs the engine-sim binary.
	EngineSim = "switchboard/engine-sim"
)

// Program is a local program that stands in for a container image. A program either
// takes the address it serves from a flag (ListenFlag) or binds wildcard addresses on
// ports named by environment variables (Modes).
type Program struct {
	// Binary is the program's file name in the pod runner's binary directory.
	Binary string
	// ListenFlag, if set, is the flag through which the program takes the one address it
	// serves: the runner appends ListenFlag and "<pod IP>:<port>" to the container's
	// arguments, the port being the container's first TCP containerPort, else
	// DefaultPort.
	ListenFlag string
	// DefaultPort is the port given with ListenFlag to a container without ports.
	DefaultPort int32
	// Modes describe a program that binds every address on ports taken from its
	// environment: the first mode whose When variables are all set applies.
	Modes []Mode
}

// Mode is one way a wildcard-binding program runs, chosen by its environment.
type Mode struct {
	// Name says what the program serves in this mode, for messages.
	Name string
	// When lists environment variables that must all be non-empty for the mode to
	// apply; a mode without any applies whenever no earlier mode does.
	When []string
	// Ports are the TCP ports the program binds in this mode.
	Ports []PortVar
	// Unsupported, if set, says why the pod runner cannot run the program in this mode.
	Unsupported string
}

// PortVar is a TCP port a program binds on every address, named by an environment
// variable.
type PortVar struct {
	// Env is the variable holding the port number.
	Env string
	// Default is the port the program binds when Env is unset or empty.
	Default int32
	// When lists environment variables that must all be non-empty for the program to
	// bind this port at all.
	When []string
}

// PublishedPort is a port a wildcard-binding program serves in a pod.
type PublishedPort struct {
	// Env is the environment variable through which the program takes its port.
	Env string
	// Port is the port the program would listen on in a real pod: Env's value in the
	// container's environment, else the default.
	Port int32
}

// Catalogue maps image repositories (images without tag or digest) to programs.
type Catalogue map[string]Program

// Default returns the catalogue of the images the local environment runs: the Gateway
// API conformance echo server and Switchboard's engine simulator.
func Default() Catalogue {
	// echo-basic's servers and the variables that configure them (its main package
	// and grpc, tcpserver and udpechoserver packages).
	return Catalogue{
		EchoBasic: {
			Binary: "echo-basic",
			Modes: []Mode{
				{Name: "gRPC echo server", When: []string{"GRPC_ECHO_SERVER"}, Ports: []PortVar{
					{Env: "HTTP_PORT", Default: 3000},
					{Env: "HTTPS_PORT", Default: 8443, When: []string{"TLS_SERVER_CERT", "TLS_SERVER_PRIV_KEY"}},
				}},
				{Name: "TCP echo server", When: []string{"TCP_ECHO_SERVER"}, Ports: []PortVar{
					{Env: "TCP_PORT", Default: 3000},
					{Env: "TLS_PORT", Default: 8443, When: []string{"TLS_SERVER_CERT", "TLS_SERVER_PRIV_KEY"}},
				}},
				{Name: "UDP echo server", When: []string{"UDP_ECHO_SERVER"},
					Unsupported: "the local pod runner publishes TCP ports only"},
				{Name: "HTTP echo server", Ports: []PortVar{
					{Env: "HTTP_PORT", Default: 3000},
					{Env: "H2C_PORT", Default: 3001},
					{Env: "HTTPS_PORT", Default: 8443, When: []string{"TLS_SERVER_CERT", "TLS_SERVER_PRIVKEY"}},
				}},
			},
		},
		EngineSim: {Binary: "engine-sim", ListenFlag: "--listen", DefaultPort: 8000},
	}
}

// Repository returns image without its tag and digest:
// "registry.k8s.io/gateway-api/echo-basic:v1.5.1" becomes
// "registry.k8s.io/gateway-api/echo-basic". A registry's port is kept.
func Repository(image string) string {
	if at := strings.IndexByte(image, '@'); at >= 0 {
		image = image[:at]
	}
	if colon := strings.LastIndexByte(image, ':'); colon > strings.LastIndexByte(image, '/') {
		image = image[:colon]
	}
	return image
}

// Lookup returns the program that stands in for image, whatever its tag or digest.
func (c Catalogue) Lookup(image string) (Program, bool) {
	p, ok := c[Repository(image)]
	return p, ok
}

// Repositories returns the catalogue's repositories, sorted.
func (c Catalogue) Repositories() []string {
	repos := make([]string, 0, len(c))
	for r := range c {
		repos = append(repos, r)
	}
	slices.Sort(repos)
	return repos
}

// UnknownImageMessage says that image is not in the catalogue and which images are.
func (c Catalogue) UnknownImageMessage(image string) string {
	return fmt.Sprintf("image %q is not known to the local pod runner; it runs: %s (any tag)",
		image, strings.Join(c.Repositories(), ", "))
}

// WildcardPorts returns the ports p binds on every address when run with the
// environment getenv, each with the port it would be in a pod. It fails when getenv
// selects a mode the pod runner cannot run or names a port that is not a port number.
// A program that takes its address from ListenFlag has none.
func (p Program) WildcardPorts(getenv func(string) string) ([]PublishedPort, error) {
	for _, m := range p.Modes {
		if !allSet(m.When, getenv) {
			continue
		}
		if m.Unsupported != "" {
			return nil, fmt.Errorf("%s cannot run as %s: %s", p.Binary, m.Name, m.Unsupported)
		}
		var ports []PublishedPort
		for _, pv := range m.Ports {
			if !allSet(pv.When, getenv) {
				continue
			}
			port := pv.Default
			if v := getenv(pv.Env); v != "" {
				n, err := strconv.ParseUint(v, 10, 16)
				if err != nil || n == 0 {
					return nil, fmt.Errorf("%s=%q is not a port number", pv.Env, v)
				}
				port = int32(n)
			}
			ports = append(ports, PublishedPort{Env: pv.Env, Port: port})
		}
		return ports, nil
	}
	return nil, nil
}

// allSet reports whether every variable in names is non-empty.
func allSet(names []string, getenv func(string) string) bool {
	for _, n := range names {
		if getenv(n) == "" {
			return false
		}
	}
	return true
}
