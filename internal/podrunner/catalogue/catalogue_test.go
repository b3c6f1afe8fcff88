package catalogue

import (
	"reflect"
	"strings"
	"testing"
)

func TestRepository(t *testing.T) {
	for image, want := range map[string]string{
		"registry.k8s.io/gateway-api/echo-basic:v1.5.1":          "registry.k8s.io/gateway-api/echo-basic",
		"registry.k8s.io/gateway-api/echo-basic":                 "registry.k8s.io/gateway-api/echo-basic",
		"registry.k8s.io/gateway-api/echo-basic@sha256:0123abcd": "registry.k8s.io/gateway-api/echo-basic",
		"localhost:5000/switchboard/engine-sim:dev@sha256:01ab":  "localhost:5000/switchboard/engine-sim",
		"localhost:5000/switchboard/engine-sim":                  "localhost:5000/switchboard/engine-sim",
		"switchboard/engine-sim:latest":                          "switchboard/engine-sim",
		"busybox":                                                "busybox",
	} {
		if got := Repository(image); got != want {
			t.Errorf("Repository(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestLookup(t *testing.T) {
	c := Default()
	for image, binary := range map[string]string{
		"registry.k8s.io/gateway-api/echo-basic:v1.6.0-dev.2": "echo-basic",
		"switchboard/engine-sim:dev":                          "engine-sim",
		"switchboard/engine-sim":                              "engine-sim",
	} {
		p, ok := c.Lookup(image)
		if !ok || p.Binary != binary {
			t.Errorf("Lookup(%q) = %+v, %v; want binary %q", image, p, ok, binary)
		}
	}
	for _, image := range []string{"registry.k8s.io/coredns/coredns:v1.12.2", "docker.io/switchboard/engine-sim", "engine-sim"} {
		if p, ok := c.Lookup(image); ok {
			t.Errorf("Lookup(%q) = %+v, want unknown", image, p)
		}
	}
}

func TestUnknownImageMessageListsKnownImages(t *testing.T) {
	msg := Default().UnknownImageMessage("nginx:1.27")
	for _, want := range []string{`"nginx:1.27"`, "not known to the local pod runner", EchoBasic, EngineSim} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

func TestEchoBasicWildcardPorts(t *testing.T) {
	echo := Default()[EchoBasic]
	tests := []struct {
		name string
		env  map[string]string
		want []PublishedPort
	}{
		{"http defaults", nil, []PublishedPort{{"HTTP_PORT", 3000}, {"H2C_PORT", 3001}}},
		{"http ports from env", map[string]string{"HTTP_PORT": "8080", "H2C_PORT": "8081"},
			[]PublishedPort{{"HTTP_PORT", 8080}, {"H2C_PORT", 8081}}},
		{"https needs cert and key", map[string]string{"TLS_SERVER_CERT": "/c"},
			[]PublishedPort{{"HTTP_PORT", 3000}, {"H2C_PORT", 3001}}},
		{"https", map[string]string{"TLS_SERVER_CERT": "/c", "TLS_SERVER_PRIVKEY": "/k"},
			[]PublishedPort{{"HTTP_PORT", 3000}, {"H2C_PORT", 3001}, {"HTTPS_PORT", 8443}}},
		{"grpc", map[string]string{"GRPC_ECHO_SERVER": "1", "TLS_SERVER_CERT": "/c", "TLS_SERVER_PRIVKEY": "/k"},
			[]PublishedPort{{"HTTP_PORT", 3000}}},
		{"grpc with tls", map[string]string{"GRPC_ECHO_SERVER": "1", "TLS_SERVER_CERT": "/c", "TLS_SERVER_PRIV_KEY": "/k", "HTTPS_PORT": "9443"},
			[]PublishedPort{{"HTTP_PORT", 3000}, {"HTTPS_PORT", 9443}}},
		{"grpc wins over tcp", map[string]string{"GRPC_ECHO_SERVER": "1", "TCP_ECHO_SERVER": "1"},
			[]PublishedPort{{"HTTP_PORT", 3000}}},
		{"tcp", map[string]string{"TCP_ECHO_SERVER": "1", "TCP_PORT": "4000"}, []PublishedPort{{"TCP_PORT", 4000}}},
		{"tcp with tls", map[string]string{"TCP_ECHO_SERVER": "1", "TLS_SERVER_CERT": "/c", "TLS_SERVER_PRIV_KEY": "/k"},
			[]PublishedPort{{"TCP_PORT", 3000}, {"TLS_PORT", 8443}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := echo.WildcardPorts(func(k string) string { return tt.env[k] })
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("WildcardPorts = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestWildcardPortsErrors(t *testing.T) {
	echo := Default()[EchoBasic]
	for name, env := range map[string]map[string]string{
		"udp":          {"UDP_ECHO_SERVER": "1"},
		"not a number": {"HTTP_PORT": "http"},
		"out of range": {"H2C_PORT": "70000"},
		"zero":         {"HTTP_PORT": "0"},
	} {
		if got, err := echo.WildcardPorts(func(k string) string { return env[k] }); err == nil {
			t.Errorf("%s: WildcardPorts = %v, want an error", name, got)
		}
	}
}

func TestEngineSimTakesItsAddressFromAFlag(t *testing.T) {
	sim := Default()[EngineSim]
	if sim.ListenFlag != "--listen" || sim.DefaultPort != 8000 {
		t.Errorf("engine-sim = %+v, want --listen with default port 8000", sim)
	}
	if ports, err := sim.WildcardPorts(func(string) string { return "" }); err != nil || len(ports) != 0 {
		t.Errorf("engine-sim WildcardPorts = %v, %v; want none", ports, err)
	}
}
