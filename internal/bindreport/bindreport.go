// Package bindreport carries the gateway replicas' listener bind failures to the manager,
// which writes them into the Gateways' status: the gateway only reads from the API
// server, so what only it can see — that a Gateway's address or port cannot be bound on
// its machine — it serves at Path on its metrics endpoint, and the manager's Poller reads
// it from every replica.
package bindreport

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Path is where a gateway serves its Report.
const Path = "/gateway/unbound"

// Addr is a Gateway address and listener port.
type Addr struct {
	IP   string `json:"ip"`
	Port int32  `json:"port"`
}

func (a Addr) String() string { return net.JoinHostPort(a.IP, fmt.Sprint(a.Port)) }

// Failure is an address and port of a Gateway that a gateway replica does not serve,
// and why.
type Failure struct {
	Addr
	// Error is what binding it returned, such as "listen tcp 203.0.113.1:80: bind:
	// cannot assign requested address".
	Error string `json:"error"`
}

// Report is what a gateway replica serves at Path: the Gateway addresses and ports it
// should serve and does not.
type Report struct {
	Unbound []Failure `json:"unbound"`
}

// Handler serves the Report that current returns, as JSON.
func Handler(current func() Report) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(current())
	})
}

// PollerOptions configure a Poller.
type PollerOptions struct {
	// Endpoints are the host:port addresses of the gateway replicas' metrics endpoints. A
	// host name stands for every address it resolves to at each poll, so the name of a
	// headless Service covers every replica behind it.
	Endpoints []string
	// Interval between two polls. Default 1s.
	Interval time.Duration
	// Timeout of one replica's answer. Default 2s.
	Timeout time.Duration
}

// Poller is a manager runnable that reads the Report of every gateway replica each
// Interval and keeps their bind failures, announcing each change on Events. A replica
// that does not answer reports nothing: its failures are forgotten until it answers.
type Poller struct {
	opts   PollerOptions
	client *http.Client
	events chan event.GenericEvent

	unbound atomic.Pointer[map[Addr]string]
}

var (
	_ manager.Runnable               = (*Poller)(nil)
	_ manager.LeaderElectionRunnable = (*Poller)(nil)
)

// NewPoller returns a Poller of the replicas at opts.Endpoints.
func NewPoller(opts PollerOptions) *Poller {
	opts.Interval = cmp.Or(opts.Interval, time.Second)
	opts.Timeout = cmp.Or(opts.Timeout, 2*time.Second)
	p := &Poller{opts: opts, client: &http.Client{Timeout: opts.Timeout}, events: make(chan event.GenericEvent, 1)}
	p.unbound.Store(&map[Addr]string{})
	return p
}

// NeedLeaderElection reports true: only the leader writes status.
func (p *Poller) NeedLeaderElection() bool { return true }

// Events announces that Unbound changed; the event carries no object.
func (p *Poller) Events() <-chan event.GenericEvent { return p.events }

// Unbound returns the Gateway addresses and ports some replica does not serve, each with
// the replica and its error. The map MUST NOT be modified.
func (p *Poller) Unbound() map[Addr]string { return *p.unbound.Load() }

// Start polls until ctx ends.
func (p *Poller) Start(ctx context.Context) error {
	ticker := time.NewTicker(p.opts.Interval)
	defer ticker.Stop()
	for {
		next := p.poll(ctx)
		if !maps.Equal(next, p.Unbound()) {
			p.unbound.Store(&next)
			select {
			case p.events <- event.GenericEvent{}:
			default: // one pending event recomputes with the newest map
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// poll reads every replica's Report at once and merges them; of several replicas
// failing the same address, the first in address order names it.
func (p *Poller) poll(ctx context.Context) map[Addr]string {
	replicas := p.replicas(ctx)
	reports := make([]Report, len(replicas))
	var wg sync.WaitGroup
	for i, replica := range replicas {
		wg.Go(func() {
			r, err := p.fetch(ctx, replica)
			if err != nil {
				log.FromContext(ctx).V(1).Info("Gateway replica did not report its listeners", "replica", replica, "error", err.Error())
			}
			reports[i] = r
		})
	}
	wg.Wait()
	out := map[Addr]string{}
	for i, r := range reports {
		for _, f := range r.Unbound {
			if _, ok := out[f.Addr]; !ok {
				out[f.Addr] = fmt.Sprintf("gateway %s: %s", replicas[i], f.Error)
			}
		}
	}
	return out
}

// replicas resolves the endpoints to the sorted host:port of every replica.
func (p *Poller) replicas(ctx context.Context) []string {
	var out []string
	for _, ep := range p.opts.Endpoints {
		host, port, err := net.SplitHostPort(ep)
		if err != nil {
			log.FromContext(ctx).Error(err, "Bad gateway status endpoint", "endpoint", ep)
			continue
		}
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			log.FromContext(ctx).V(1).Info("Cannot resolve gateway status endpoint", "endpoint", ep, "error", err.Error())
			continue
		}
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip, port))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// fetch reads the Report of the replica at hostPort.
func (p *Poller) fetch(ctx context.Context, hostPort string) (Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort+Path, nil)
	if err != nil {
		return Report{}, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return Report{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Report{}, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	var r Report
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&r); err != nil {
		return Report{}, errors.Join(errors.New("decode the report"), err)
	}
	return r, nil
}
