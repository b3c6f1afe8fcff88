package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// unbindableGateways: two Gateways the gateway process cannot serve, one on a port that
// another program holds, one on an address that is not this machine's. The gateway
// reports what it cannot bind on its metrics endpoint and the manager writes it: each
// Gateway is Programmed=False AddressNotUsable, its listener Programmed=False Pending,
// with the bind error in the message. Once the other program lets the port go, the
// gateway binds it, the Gateway becomes Programmed=True and the gateway answers there.
func unbindableGateways() {
	squatter, err := net.Listen("tcp", "127.0.0.51:0")
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = squatter.Close() }()
	port := squatter.Addr().(*net.TCPAddr).Port
	for name, ip := range map[string]string{"squatted": "127.0.0.51", "elsewhere": "203.0.113.1"} {
		_, err := sys.kubectlApply(fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: %s
  namespace: %s
spec:
  gatewayClassName: switchboard
  addresses:
  - type: IPAddress
    value: %s
  listeners:
  - name: http
    port: %d
    protocol: HTTP
`, name, ns, ip, port))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _, _ = sys.kubectl("delete", "gateway", name, "-n", ns, "--wait=false") })
	}

	for name, cause := range map[string]string{"squatted": "address already in use", "elsewhere": "cannot assign requested address"} {
		Eventually(func() (string, error) { return sys.gatewayCondition(name, "Programmed") }, time.Minute).
			Should(And(HavePrefix("False AddressNotUsable "), ContainSubstring(cause)), "Gateway %s", name)
		Expect(sys.kubectl("get", "gateway", name, "-n", ns, "-o",
			`jsonpath={.status.listeners[0].conditions[?(@.type=="Programmed")].status} {.status.listeners[0].conditions[?(@.type=="Programmed")].reason}`)).
			To(Equal("False Pending"), "Gateway %s's listener", name)
	}

	Expect(squatter.Close()).To(Succeed())
	Eventually(func() (string, error) { return sys.gatewayCondition("squatted", "Programmed") }, time.Minute).
		Should(HavePrefix("True Programmed "))
	Eventually(func() (int, error) {
		resp, err := http.Get("http://" + net.JoinHostPort("127.0.0.51", strconv.Itoa(port)) + "/")
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}, 10*time.Second).Should(Equal(http.StatusNotFound), "the gateway serves the freed port (no route attaches to it)")
	Expect(sys.gatewayCondition("elsewhere", "Programmed")).To(HavePrefix("False AddressNotUsable "))
}

// gatewayCondition returns "<status> <reason> <message>" of the condition typ of the
// suite's Gateway name, as kubectl shows it.
func (s *system) gatewayCondition(name, typ string) (string, error) {
	return s.kubectl("get", "gateway", name, "-n", ns, "-o",
		fmt.Sprintf(`jsonpath={.status.conditions[?(@.type=="%s")].status} {.status.conditions[?(@.type=="%s")].reason} {.status.conditions[?(@.type=="%s")].message}`, typ, typ, typ))
}
