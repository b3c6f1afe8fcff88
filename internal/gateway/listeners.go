package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/switchboard-llm/switchboard/internal/bindreport"
	"github.com/switchboard-llm/switchboard/internal/gateway/inbound"
	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// server serves one listened address: package h1serve's server in clear text, net/http's
// over TLS.
type server interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
	Close() error
}

// ListenerOptions configure Listeners.
type ListenerOptions struct {
	// Host, when set, is bound instead of each Gateway's own address, on the same ports:
	// for a replica that cannot hold the Gateways' addresses (a second replica on one
	// machine, or a pod reached through a Service). Requests on a port are then served
	// for the one Gateway listening on it; a second Gateway on the same port is not
	// served by this replica. Empty binds each Gateway's address.
	Host string
	// SyncInterval is how often the listened addresses are reconciled with the Gateways'
	// listeners. Default 250ms.
	SyncInterval time.Duration
	// DrainTimeout bounds how long stopping waits for in-flight requests. Default 30s.
	DrainTimeout time.Duration
}

// Listeners is a manager runnable that serves the gateway on the addresses of
// Switchboard's Gateways — each Gateway's own IP, on the ports of its HTTP and HTTPS
// listeners — opening and closing them as Gateways change. On an HTTP port it serves
// HTTP/1.1 with package h1serve (and HTTP/2 to clients with prior knowledge). On an HTTPS
// port it terminates TLS (HTTP/2 and HTTP/1.1, by ALPN, with net/http's server) with the
// certificate of the listener that owns the client's server name, read at each handshake
// from the route table. An
// address that cannot be bound is logged, counted in
// switchboard_gateway_listener_bind_failures_total, reported by Report and retried at
// the next sync.
//
// Synchronisation model: the goroutine running Start owns servers and unbound, and
// publishes report after each sync; the servers' goroutines are tracked by wg and only
// serve requests.
type Listeners struct {
	g    *Gateway
	opts ListenerOptions

	servers map[routetable.Addr]server
	unbound map[routetable.Addr]string
	report  atomic.Pointer[bindreport.Report]
	wg      sync.WaitGroup
	// listening is set by the first sync that read the route table after the cache had
	// synced: from then on every listener of the cluster's Gateways has been opened, or
	// reported unbound.
	listening atomic.Bool
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
	l := &Listeners{g: g, opts: opts, servers: make(map[routetable.Addr]server), unbound: make(map[routetable.Addr]string)}
	l.report.Store(&bindreport.Report{Unbound: []bindreport.Failure{}})
	return l
}

// Report returns the Gateway addresses and ports that the last sync could not serve, for
// the manager to write into the Gateways' status (see package bindreport).
func (l *Listeners) Report() bindreport.Report { return *l.report.Load() }

// NeedLeaderElection reports false: every gateway replica serves traffic.
func (l *Listeners) NeedLeaderElection() bool { return false }

// Start reconciles the listened addresses every SyncInterval until ctx ends, then stops
// accepting connections, drains in-flight requests for up to DrainTimeout and returns.
func (l *Listeners) Start(ctx context.Context) error {
	ticker := time.NewTicker(l.opts.SyncInterval)
	defer ticker.Stop()
	for {
		l.sync(ctx)
		select {
		case <-ctx.Done():
			l.stop(l.take(slices.Collect(maps.Keys(l.servers))))
			l.wg.Wait()
			l.g.Close()
			return nil
		case <-ticker.C:
		}
	}
}

// ReadyCheck is a readiness check (for /readyz) that passes once the listeners of the
// cluster's Gateways are open: after the first sync of the addresses that followed the
// cache's initial listing. Before it, a replica whose cache says ready could refuse
// connections for up to SyncInterval.
func (l *Listeners) ReadyCheck(*http.Request) error {
	if !l.listening.Load() {
		return errors.New("the Gateways' listeners are not open yet")
	}
	return nil
}

// sync opens the addresses of the current listeners and closes the others.
func (l *Listeners) sync(ctx context.Context) {
	synced := l.g.view.Synced() // before the table, which then holds the listed state
	table := l.g.Table()
	addrs := table.Addrs()
	var gone []routetable.Addr
	for addr := range l.servers {
		if !slices.Contains(addrs, addr) {
			gone = append(gone, addr)
		}
	}
	if len(gone) > 0 {
		servers := l.take(gone)
		l.wg.Go(func() { l.stop(servers) }) // draining must not hold up the other addresses
	}
	for addr := range l.unbound {
		if !slices.Contains(addrs, addr) {
			delete(l.unbound, addr)
		}
	}
	var owners map[string]types.NamespacedName // Gateway by address, for a shared host
	if l.opts.Host != "" {
		owners = gatewaysByAddress(table)
	}
	for _, addr := range addrs {
		if _, ok := l.servers[addr]; !ok {
			l.serve(ctx, addr, owners)
		}
	}
	l.publish()
	if synced {
		l.listening.Store(true)
	}
}

// gatewaysByAddress returns the Gateway of each address of table.
func gatewaysByAddress(table *routetable.Table) map[string]types.NamespacedName {
	owners := map[string]types.NamespacedName{}
	for _, gw := range table.Gateways() {
		for _, ip := range gw.Addresses {
			owners[ip] = gw.Gateway
		}
	}
	return owners
}

// publish stores the report of l.unbound, sorted by address.
func (l *Listeners) publish() {
	r := bindreport.Report{Unbound: make([]bindreport.Failure, 0, len(l.unbound))}
	for addr, msg := range l.unbound {
		r.Unbound = append(r.Unbound, bindreport.Failure{Addr: bindreport.Addr{IP: addr.IP, Port: addr.Port}, Error: msg})
	}
	slices.SortFunc(r.Unbound, func(a, b bindreport.Failure) int {
		return cmp.Or(cmp.Compare(a.IP, b.IP), cmp.Compare(a.Port, b.Port))
	})
	l.report.Store(&r)
}

// take removes the servers of addrs from l.servers and returns them keyed by address.
func (l *Listeners) take(addrs []routetable.Addr) map[routetable.Addr]server {
	out := make(map[routetable.Addr]server, len(addrs))
	for _, a := range addrs {
		out[a] = l.servers[a]
		delete(l.servers, a)
	}
	return out
}

// serve starts serving addr; an address that cannot be bound is recorded in l.unbound
// and retried at the next sync. owners names the Gateway of each address when the
// listeners share opts.Host.
func (l *Listeners) serve(ctx context.Context, addr routetable.Addr, owners map[string]types.NamespacedName) {
	host := addr.IP
	if l.opts.Host != "" {
		host = l.opts.Host
		for served := range l.servers {
			if served.Port != addr.Port {
				continue
			}
			if owners[served.IP] != owners[addr.IP] { // another address of the same Gateway is served alike
				l.unbound[addr] = fmt.Sprintf("port %d of --listen-host %s is served for Gateway %s", addr.Port, host, owners[served.IP])
			}
			return
		}
	}
	hostPort := net.JoinHostPort(host, strconv.Itoa(int(addr.Port)))
	ln, err := net.Listen("tcp", hostPort)
	if err != nil {
		if _, known := l.unbound[addr]; !known {
			log.FromContext(ctx).Error(err, "Cannot listen; retrying", "address", hostPort)
		}
		l.g.metrics.bindFailures.Inc()
		l.unbound[addr] = err.Error()
		return
	}
	delete(l.unbound, addr)
	var srv server
	var serve func(net.Listener) error
	if addr.TLS {
		tlsSrv := inbound.NewServer(l.g.Handler(addr), l.g.opts.Inbound)
		tlsSrv.TLSConfig = l.g.tlsConfig(addr)
		// The certificates come from TLSConfig; ServeTLS also offers HTTP/2 by ALPN.
		srv, serve = tlsSrv, func(ln net.Listener) error { return tlsSrv.ServeTLS(ln, "", "") }
	} else {
		plain := inbound.NewClearTextServer(l.g.Handler(addr), l.g.opts.Inbound)
		srv, serve = plain, plain.Serve
	}
	l.servers[addr] = srv
	log.FromContext(ctx).Info("Serving gateway listener", "address", ln.Addr().String(), "tls", addr.TLS)
	l.wg.Go(func() {
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.FromContext(ctx).Error(err, "Gateway listener failed", "address", hostPort)
		}
	})
}

// stop closes servers after draining their in-flight requests, all at once, for up to
// DrainTimeout.
func (l *Listeners) stop(servers map[routetable.Addr]server) {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.DrainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
		})
	}
	wg.Wait()
}
