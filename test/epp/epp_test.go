package epp_test

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/testenv"
	"github.com/switchboard-llm/switchboard/test/epp"
)

// waitTimeout bounds every wait of the harness.
const waitTimeout = 30 * time.Second

// TestGatewayPicker runs the EPP protocol suite against the gateway binary's ext_proc
// picker as the endpoint picker of an InferencePool of three pods, each serving two
// data-parallel ranks (an engine-sim process on each of the pool's two targetPorts) that
// each take one request at a time, without a queue, with two replicas of the picker
// electing a leader.
func TestGatewayPicker(t *testing.T) {
	const ns, model = "epp", "llama-3-8b"
	c := testenv.Start(t)
	gateway := testenv.Build(t, "gateway")
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	// The pool's pods serve a rank on each of its two target ports: the pod's own engine
	// port (its switchboard.dev/port label), and another.
	first := testenv.EngineProcess(t, "127.0.0.103", model)
	_, port, _ := net.SplitHostPort(first)
	_, rankPort, _ := net.SplitHostPort(testenv.FreeAddr(t, "127.0.0.103"))
	var endpoints []string // the ranks of each pod in turn
	for i, host := range []string{"127.0.0.103", "127.0.0.104", "127.0.0.105"} {
		own := first
		if i > 0 {
			own = testenv.EngineProcessAt(t, net.JoinHostPort(host, port), model)
		}
		endpoints = append(endpoints, own, testenv.EngineProcessAt(t, net.JoinHostPort(host, rankPort), model))
		c.EnginePod(t, ns, "engine-"+strconv.Itoa(i), model, own, map[string]string{"pool": "suite"})
	}
	// A pod of the namespace outside the pool's selector: never picked.
	c.EnginePod(t, ns, "outsider", model, net.JoinHostPort("127.0.0.106", port), nil)
	targetPort, _ := strconv.Atoi(port)
	secondPort, _ := strconv.Atoi(rankPort)
	c.Create(t,
		&inferencev1.InferencePool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "suite"},
			Spec: inferencev1.InferencePoolSpec{
				Selector:    inferencev1.LabelSelector{MatchLabels: map[inferencev1.LabelKey]inferencev1.LabelValue{"pool": "suite"}},
				TargetPorts: []inferencev1.Port{{Number: inferencev1.PortNumber(targetPort)}, {Number: inferencev1.PortNumber(secondPort)}},
			},
		},
		// The pool's RoutingPolicy, named like it.
		&v1alpha1.RoutingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "suite"},
			Spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}},
	)

	kubeconfig := c.Kubeconfig(t, "gateway")
	type replica struct {
		addr string
		proc *testenv.Process
		out  *testenv.Buffer
	}
	var replicas []replica
	for _, host := range []string{"127.0.0.100", "127.0.0.101"} {
		addr := testenv.FreeAddr(t, host)
		out := &testenv.Buffer{}
		proc := testenv.RunTo(t, io.MultiWriter(os.Stderr, out), gateway,
			"--kubeconfig", kubeconfig,
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
			"--ext-proc-bind-address", addr, "--ext-proc-pool", ns+"/suite",
			"--ext-proc-leader-elect",
			"--max-in-flight-per-endpoint", "1", "--max-queued-per-model", "0")
		replicas = append(replicas, replica{addr, proc, out})
	}
	var leader, follower replica
	testenv.WaitUntil(t, waitTimeout, "a replica leads", func() bool {
		for i, r := range replicas {
			if readiness(t, r.addr) == healthpb.HealthCheckResponse_SERVING {
				leader, follower = r, replicas[1-i]
				return true
			}
		}
		return false
	})

	t.Run("a synced follower is alive and not ready", func(t *testing.T) {
		testenv.WaitUntil(t, waitTimeout, "the follower's cache is synced", func() bool {
			return strings.Contains(follower.out.String(), "Metadata cache synced")
		})
		if st := health(t, follower.addr, "liveness"); st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("follower liveness = %v, want SERVING", st)
		}
		for _, svc := range []string{"readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
			if st := health(t, follower.addr, svc); st != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("follower %s = %v while the other replica leads, want NOT_SERVING", svc, st)
			}
		}
	})

	t.Run("suite", func(t *testing.T) {
		epp.Run(t, leader.addr, epp.Pool{Model: model, Endpoints: endpoints, MinFallbacks: 2, OneAtATime: true})
	})

	t.Run("the follower becomes ready when the leader stops", func(t *testing.T) {
		if err := leader.proc.Stop(t, waitTimeout); err != nil {
			t.Fatalf("leader exit: %v", err)
		}
		testenv.WaitUntil(t, waitTimeout, "the follower is ready", func() bool {
			return readiness(t, follower.addr) == healthpb.HealthCheckResponse_SERVING
		})
	})
}

// readiness is the readiness health status of the picker at addr.
func readiness(t *testing.T, addr string) healthpb.HealthCheckResponse_ServingStatus {
	return health(t, addr, "readiness")
}

// health is the status of service in the gRPC health of the picker at addr, UNKNOWN when
// it does not answer.
func health(t *testing.T, addr, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return resp.GetStatus()
}
