package metadata

import (
	"net"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// DefaultDrainTimeout is ServerOptions.DrainTimeout when left zero.
const DefaultDrainTimeout = 30 * time.Second

// ServerOptions configure the server NewServer returns.
type ServerOptions struct {
	// Addr is the address to listen on, such as ":8090". Ignored when Listener is set.
	Addr string
	// Listener, if set, is the already-bound listener to serve on; the server closes it
	// when it stops.
	Listener net.Listener
	// DrainTimeout bounds how long stopping waits for in-flight requests after the
	// server stops accepting connections. Defaults to DefaultDrainTimeout.
	DrainTimeout time.Duration
}

// NewServer returns a manager runnable serving h over HTTP until the manager stops, then
// draining in-flight requests for up to DrainTimeout. It runs on every replica, leader
// or not; a bind failure ends the manager with an error.
func NewServer(h http.Handler, opts ServerOptions) *manager.Server {
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	return &manager.Server{
		Name:     "metadata-api",
		Server:   &http.Server{Addr: opts.Addr, Handler: h, ReadHeaderTimeout: 10 * time.Second},
		Listener: opts.Listener,
		// OnlyServeWhenLeader is false: the service has no leader.
		ShutdownTimeout: &opts.DrainTimeout,
	}
}
