package extproc

import (
	"context"
	"fmt"
	"net"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Runnable returns a manager runnable serving s over plaintext gRPC on addr until its
// context ends, then stopping gracefully (in-flight streams finish).
func (s *Server) Runnable(addr string) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen for ext_proc on %s: %w", addr, err)
		}
		g := s.GRPCServer()
		log.FromContext(ctx).Info("Serving ext_proc endpoint picker", "address", ln.Addr().String())
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			<-ctx.Done()
			g.GracefulStop()
		}()
		err = g.Serve(ln)
		<-stopped
		if err != nil {
			return fmt.Errorf("serve ext_proc: %w", err)
		}
		return nil
	})
}
