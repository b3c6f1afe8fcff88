package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// ListenerOptions configure Listeners.
type ListenerOptions struct {
	// Host is the address the listeners bind, such as "127.0.0.1"; empty binds every
	// interface.
	Host string
	// SyncInterval is how often the listened ports are reconciled with the Gateways'
	// listeners. Default 250ms.
	SyncInterval time.Duration
	// DrainTimeout bounds how long stopping waits for in-flight requests. Default 30s.
	DrainTimeout time.Duration
}

// Listeners is a manager runnable that serves the gateway on the ports of the HTTP
// listeners of Switchboard's Gateways, opening and closing ports as Gateways change.
//
// Synchronisation model: the goroutine running Start owns servers; the servers'
// goroutines are tracked by wg and only serve requests.
type Listeners struct {
	g    *Gateway
	opts ListenerOptions

	servers map[int32]*http.Server
	wg      sync.WaitGroup
}

var (
	_ manager.Runnable               = (*Listeners)(nil)
	_ manager.LeaderElectionRunnable = (*Listeners)(nil)
)

// Listeners returns the runnable that serves g's Gateways.
func (g *Gateway) Listeners(opts ListenerOptions) *Listeners {
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = 250 * time.Millisecond
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	return &Listeners{g: g, opts: opts, servers: make(map[int32]*http.Server)}
}

// NeedLeaderElection reports false: every gateway replica serves traffic.
func (l *Listeners) NeedLeaderElection() bool { return false }

// Start reconciles the listened ports every SyncInterval until ctx ends, then stops
// accepting connections, drains in-flight requests for up to DrainTimeout and returns.
func (l *Listeners) Start(ctx context.Context) error {
	ticker := time.NewTicker(l.opts.SyncInterval)
	defer ticker.Stop()
	for {
		l.sync(ctx)
		select {
		case <-ctx.Done():
			for port := range l.servers {
				l.stop(port)
			}
			l.wg.Wait()
			l.g.Close()
			return nil
		case <-ticker.C:
		}
	}
}

// sync opens the ports of the current listeners and closes the others.
func (l *Listeners) sync(ctx context.Context) {
	ports := l.g.Table().Ports()
	for port := range l.servers {
		if !slices.Contains(ports, port) {
			l.stop(port)
		}
	}
	for _, port := range ports {
		if _, ok := l.servers[port]; !ok {
			l.serve(ctx, port)
		}
	}
}

// serve starts serving port; a port that cannot be bound is retried at the next sync.
func (l *Listeners) serve(ctx context.Context, port int32) {
	addr := net.JoinHostPort(l.opts.Host, strconv.Itoa(int(port)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.FromContext(ctx).Error(err, "Cannot listen; retrying", "address", addr)
		return
	}
	srv := &http.Server{Handler: l.g.Handler(port), ReadHeaderTimeout: 10 * time.Second}
	l.servers[port] = srv
	log.FromContext(ctx).Info("Serving gateway listener", "address", ln.Addr().String())
	l.wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.FromContext(ctx).Error(err, "Gateway listener failed", "address", addr)
		}
	})
}

// stop closes port after draining its in-flight requests for up to DrainTimeout.
func (l *Listeners) stop(port int32) {
	srv := l.servers[port]
	delete(l.servers, port)
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.DrainTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
}
