package extproc

import (
	"context"
	"fmt"
	"net"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Health services of the Endpoint Picker Protocol, served by Serve.
const (
	// LivenessService is SERVING while the process answers gRPC.
	LivenessService = "liveness"
	// ReadinessService is SERVING once every Options.Ready condition holds, until
	// shutdown.
	ReadinessService = "readiness"
)

// Runnable returns a manager runnable that listens on addr and serves s there (see
// Serve) until its context ends, on every replica, leader or not: readiness is what
// tells them apart (Options.Ready).
func (s *Server) Runnable(addr string) manager.Runnable {
	return runnable{s, addr}
}

// runnable is Server.Runnable's.
type runnable struct {
	s    *Server
	addr string
}

func (r runnable) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("listen for ext_proc on %s: %w", r.addr, err)
	}
	return r.s.Serve(ctx, ln)
}

// NeedLeaderElection reports false: followers serve health too.
func (runnable) NeedLeaderElection() bool { return false }

// Serve serves s over plaintext gRPC on ln, with the gRPC health service, until ctx ends,
// then stops gracefully (in-flight streams finish) and closes ln. Health: LivenessService
// is SERVING at once; ReadinessService and the ExternalProcessor service (also the
// server-wide "") are NOT_SERVING until every Options.Ready condition has returned nil; on shutdown every
// service turns NOT_SERVING.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	g := s.GRPCServer()
	hs := health.NewServer()
	hs.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	setReady(hs, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	log.FromContext(ctx).Info("Serving ext_proc endpoint picker", "address", ln.Addr().String())

	ctx, cancel := context.WithCancel(ctx) // also ends the goroutine below if g.Serve fails
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if s.waitReady(ctx) == nil {
			setReady(hs, healthpb.HealthCheckResponse_SERVING)
		}
		<-ctx.Done()
		hs.Shutdown()
		g.GracefulStop()
	}()
	err := g.Serve(ln)
	cancel()
	<-stopped
	if err != nil {
		return fmt.Errorf("serve ext_proc: %w", err)
	}
	return nil
}

// waitReady waits until every condition of readiness holds or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	for _, ready := range s.ready {
		if err := ready(ctx); err != nil {
			return err
		}
	}
	return nil
}

// setReady sets the status of the services that follow readiness.
func setReady(hs *health.Server, st healthpb.HealthCheckResponse_ServingStatus) {
	for _, svc := range []string{"", ReadinessService, extprocv3.ExternalProcessor_ServiceDesc.ServiceName} {
		hs.SetServingStatus(svc, st)
	}
}
