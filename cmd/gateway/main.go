// Command gateway is Switchboard's data plane: an OpenAI-compatible HTTP proxy that
// serves the HTTP and HTTPS listeners of Gateways of class switchboard.dev/gateway-controller,
// applying their HTTPRoutes and RoutingPolicies per request, plus an optional Envoy
// ext_proc endpoint picker. It only reads from the API server, but for the Lease of the
// picker's leader election when --ext-proc-leader-elect is set.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/bindreport"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/extproc"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/gateway/inbound"
	"github.com/switchboard-llm/switchboard/internal/routetable"
	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
	"github.com/switchboard-llm/switchboard/internal/routing/strategies"
	"github.com/switchboard-llm/switchboard/internal/scheme"
)

// defaultGCPercent is the gateway's GOGC unless the environment sets one. Every request
// allocates (its state, and the prompt's text for prefix-cache), and the live heap of a
// small fleet is small, so at Go's default of 100 the collector runs often: make bench's
// proxy section measured, before least-request stopped building the prompt's text, 51
// against 47 us of CPU per chat request and 758 against 654 us per 434 KB prompt (400
// saved little more: 45 and 648 us). The heap peaks at up to three times the live heap
// instead of twice; GOMEMLIMIT (config/gateway sets it under the container's limit)
// bounds it.
const defaultGCPercent = 200

func main() {
	var (
		metricsAddr, probeAddr, pprofAddr, listenHost, defaultStrategy string
		gw                                                             gateway.Options
		scrape                                                         cache.ScrapeOptions
		drain                                                          time.Duration
		picker                                                         pickerFlags
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8081", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8082", "Address of /healthz and /readyz.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "Address of the pprof endpoints; empty disables them.")
	flag.StringVar(&picker.addr, "ext-proc-bind-address", "", "Address of the Envoy ext_proc endpoint picker (gRPC, plaintext); empty disables it.")
	flag.StringVar(&picker.namespace, "ext-proc-namespace", "", "Namespace of the engine pods the ext_proc picker chooses from; required with --ext-proc-bind-address.")
	flag.StringVar(&picker.selector, "ext-proc-pod-selector", "", "Label selector of the engine pods the ext_proc picker chooses from, such as app=llama; empty selects every engine pod of --ext-proc-namespace.")
	flag.StringVar(&picker.pool, "ext-proc-pool", "", "InferencePool (namespace/name) whose endpoints (every targetPort of its pods, each rank on its own ip:port) the ext_proc picker chooses from, with the RoutingPolicy its "+routetable.PoolPolicyAnnotation+" annotation names (else the one named like the pool); replaces --ext-proc-namespace and --ext-proc-pod-selector.")
	flag.BoolVar(&picker.leaderElect, "ext-proc-leader-elect", false, "Elect one replica's ext_proc picker as the leader through a Lease in --ext-proc-namespace; only the leader reports gRPC readiness, as the Endpoint Picker Protocol asks of several replicas.")
	flag.StringVar(&picker.leaseName, "ext-proc-leader-election-id", "switchboard-ext-proc", "Name of the Lease of --ext-proc-leader-elect.")
	flag.StringVar(&listenHost, "listen-host", "", "Host to bind every Gateway's listener ports on instead of each Gateway's own address (for a replica that cannot hold those addresses); empty binds each Gateway's address.")
	flag.StringVar(&defaultStrategy, "default-strategy", string(v1alpha1.StrategyLeastRequest), "Strategy of the ext_proc endpoint picker.")
	flag.Int64Var(&gw.Inbound.MaxBodyBytes, "max-body-bytes", inbound.DefaultMaxBodyBytes, "Largest accepted request body (413 beyond).")
	flag.IntVar(&gw.Inbound.MaxHeaderBytes, "max-header-bytes", inbound.DefaultMaxHeaderBytes, "Largest accepted request header block (431 beyond).")
	flag.DurationVar(&gw.Inbound.ReadHeaderTimeout, "read-header-timeout", inbound.DefaultReadHeaderTimeout, "Longest wait for a request's headers.")
	flag.DurationVar(&gw.Inbound.BodyReadTimeout, "body-read-timeout", inbound.DefaultBodyReadTimeout, "Longest wait for a whole request body that the gateway reads (408 beyond).")
	flag.DurationVar(&gw.Inbound.IdleTimeout, "idle-timeout", inbound.DefaultIdleTimeout, "Longest a keep-alive connection may stay idle.")
	flag.DurationVar(&gw.UpstreamTimeout, "upstream-timeout", 5*time.Minute, "Longest wait for an engine's response headers.")
	flag.DurationVar(&gw.UpstreamIdleTimeout, "upstream-idle-timeout", 5*time.Minute, "Longest wait for more of a response body once its headers are relayed; a stalled engine is cut off beyond it.")
	flag.Int64Var(&gw.Limits.MaxInFlight, "max-in-flight-per-endpoint", 0, "Requests in flight per endpoint beyond which requests queue; 0 means no cap.")
	flag.IntVar(&gw.Limits.MaxQueued, "max-queued-per-model", 1000, "Requests queued per model when every endpoint is at its cap; beyond it, 429.")
	flag.DurationVar(&gw.Limits.MaxQueueWait, "max-queue-wait", 30*time.Second, "Longest a queued request waits for an endpoint below its cap when its RoutingPolicy's spec.queue.maxWait does not say; beyond it, 503 with Retry-After. 0 means until the client gives up.")
	flag.Int64Var(&gw.PrefixIndexMemoryBytes, "prefix-index-memory-bytes", prefixcache.DefaultMemoryBytes, "Memory of every prefix-cache routing index together, whatever the policies' maxBlocksPerEndpoint (about 64 bytes per block); beyond it the least recently learnt blocks are forgotten.")
	flag.DurationVar(&scrape.Interval, "metrics-scrape-interval", 100*time.Millisecond, "Interval between two scrapes of an engine's /metrics.")
	flag.DurationVar(&scrape.Timeout, "metrics-scrape-timeout", time.Second, "Timeout of one engine metrics scrape.")
	flag.IntVar(&scrape.MaxConcurrent, "metrics-scrape-max-concurrent", cache.DefaultScrapeMaxConcurrent, "Engines scraped (or listed) at once.")
	flag.DurationVar(&drain, "drain-timeout", 30*time.Second, "Longest wait for in-flight requests on shutdown.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	gw.DefaultStrategy = v1alpha1.Strategy(defaultStrategy)

	if err := run(metricsAddr, probeAddr, pprofAddr, listenHost, picker, drain, gw, scrape); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// run wires the gateway: a manager whose informers feed the gateway's cache context,
// the request path on the Gateways' listeners, the ext_proc picker and health probes.
func run(metricsAddr, probeAddr, pprofAddr, listenHost string, picker pickerFlags, drain time.Duration, opts gateway.Options, scrape cache.ScrapeOptions) error {
	scope, err := picker.scope()
	if err != nil {
		return err
	}
	s, err := scheme.New()
	if err != nil {
		return err
	}
	// 1. A manager for informers, probes and metrics; the gateway writes nothing.
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  s,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		PprofBindAddress:        pprofAddr,
		GracefulShutdownTimeout: &drain,
		// Only the ext_proc picker's readiness waits for the Lease (step 5): every other
		// part of the gateway serves on every replica (NeedLeaderElection false).
		LeaderElection:                picker.leaderElect,
		LeaderElectionID:              picker.leaseName,
		LeaderElectionNamespace:       scope.Namespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// 2. The gateway's cache context: pods, adapters, metrics, policies, routes. Without
	// the ext_proc picker, only routes send requests to engines: only their backends are
	// scraped.
	view, err := cache.InitForGateway(mgr, cache.Options{Scrape: scrape, BackendsOnly: picker.addr == ""})
	if err != nil {
		return err
	}
	// 3. Validate the default strategy before serving.
	if _, err := strategies.NewRegistry(strategies.Deps{Reserver: view.Tracker, StaleAfter: time.Second}).
		Picker(opts.DefaultStrategy, &v1alpha1.RoutingPolicySpec{Strategy: opts.DefaultStrategy}); err != nil {
		return fmt.Errorf("--default-strategy: %w", err)
	}
	// 4. The request path on the Gateways' HTTP and HTTPS listeners, each Gateway on its address.
	g := gateway.New(view, opts)
	if err := g.Register(ctrlmetrics.Registry); err != nil {
		return fmt.Errorf("register gateway metrics: %w", err)
	}
	listeners := g.Listeners(gateway.ListenerOptions{Host: listenHost, DrainTimeout: drain})
	if err := mgr.Add(listeners); err != nil {
		return fmt.Errorf("add listeners: %w", err)
	}
	// What only this replica can see, for the manager to write into the Gateways' status.
	if err := mgr.AddMetricsServerExtraHandler(bindreport.Path, bindreport.Handler(listeners.Report)); err != nil {
		return fmt.Errorf("add %s: %w", bindreport.Path, err)
	}
	// 5. The Envoy ext_proc endpoint picker, if asked for, within its scope; its gRPC
	// readiness follows the cache's sync and, with leader election, the Lease.
	if picker.addr != "" {
		ready := []func(context.Context) error{view.WaitForSync}
		if picker.leaderElect {
			ready = append(ready, func(ctx context.Context) error {
				select {
				case <-mgr.Elected():
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		}
		server := extproc.NewServer(g.Picker(scope), extproc.Options{MaxBodyBytes: opts.Inbound.MaxBodyBytes, Ready: ready})
		if err := mgr.Add(server.Runnable(picker.addr)); err != nil {
			return fmt.Errorf("add ext_proc server: %w", err)
		}
	}
	// 6. Probes: alive once started, ready once the cache holds the cluster's state and
	// the listeners of its Gateways are open.
	if err := view.AddProbes(mgr); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("listeners", listeners.ReadyCheck); err != nil {
		return fmt.Errorf("add readyz check: %w", err)
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// pickerFlags are the flags of the ext_proc endpoint picker.
type pickerFlags struct {
	addr, namespace, selector, pool, leaseName string
	leaderElect                                bool
}

// scope returns the picker's scope, or an error naming the flag that is missing or
// invalid when the picker is enabled.
func (f pickerFlags) scope() (gateway.PickScope, error) {
	if f.addr == "" {
		return gateway.PickScope{}, nil
	}
	if f.pool != "" {
		ns, name, ok := strings.Cut(f.pool, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return gateway.PickScope{}, fmt.Errorf("--ext-proc-pool %q: want namespace/name", f.pool)
		}
		if f.namespace != "" || f.selector != "" {
			return gateway.PickScope{}, errors.New("--ext-proc-pool replaces --ext-proc-namespace and --ext-proc-pod-selector: set one or the other")
		}
		return gateway.PickScope{Namespace: ns, Pool: &types.NamespacedName{Namespace: ns, Name: name}}, nil
	}
	if f.namespace == "" {
		return gateway.PickScope{}, errors.New("--ext-proc-namespace is required with --ext-proc-bind-address: the picker never chooses outside an explicit scope")
	}
	sel, err := labels.Parse(f.selector)
	if err != nil {
		return gateway.PickScope{}, fmt.Errorf("--ext-proc-pod-selector: %w", err)
	}
	return gateway.PickScope{Namespace: f.namespace, Selector: sel}, nil
}
