package epp_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-llm/switchboard/internal/testenv"
	"github.com/switchboard-llm/switchboard/test/epp"
)

// TestGatewayPicker runs the EPP protocol suite against the gateway binary's ext_proc
// picker, scoped to a namespace of three engine-sim pods that each take one request at a
// time, without a queue.
func TestGatewayPicker(t *testing.T) {
	const ns, model = "epp", "llama-3-8b"
	c := testenv.Start(t)
	gateway := testenv.Build(t, "gateway")
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	var endpoints []string
	for _, host := range []string{"127.0.0.103", "127.0.0.104", "127.0.0.105"} {
		e := testenv.EngineProcess(t, host, model)
		c.EnginePod(t, ns, "engine-"+host, model, e, map[string]string{"pool": "suite"})
		endpoints = append(endpoints, e)
	}
	// A pod of the namespace outside the picker's selector: never picked.
	c.EnginePod(t, ns, "outsider", model, testenv.FreeAddr(t, "127.0.0.106"), nil)

	picker := testenv.FreeAddr(t, "127.0.0.100")
	testenv.Run(t, gateway,
		"--kubeconfig", c.Kubeconfig(t, "gateway"),
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--ext-proc-bind-address", picker, "--ext-proc-namespace", ns, "--ext-proc-pod-selector", "pool=suite",
		"--max-in-flight-per-endpoint", "1", "--max-queued-per-model", "0")

	epp.Run(t, picker, epp.Pool{Model: model, Endpoints: endpoints, MinFallbacks: 2, OneAtATime: true})
}
