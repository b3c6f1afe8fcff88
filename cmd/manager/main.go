// Command manager runs Switchboard's controllers: ModelAdapter placement and LoRA
// lifecycle, RoutingPolicy status, and status for the GatewayClasses, Gateways and
// HTTPRoutes of Switchboard's gateway controller. It writes only status, finalizers,
// events and its leader-election lease.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-llm/switchboard/internal/bindreport"
	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/controller/gatewaystatus"
	"github.com/switchboard-llm/switchboard/internal/controller/modeladapter"
	"github.com/switchboard-llm/switchboard/internal/controller/policystatus"
	"github.com/switchboard-llm/switchboard/internal/scheme"
)

// options are the manager's command-line settings.
type options struct {
	metricsAddr, probeAddr  string
	leaderElect             bool
	leaderElectionNamespace string
	// leaseDuration, renewDeadline and retryPeriod time the leader election.
	leaseDuration, renewDeadline, retryPeriod time.Duration
	addressPool                               *gatewaystatus.AddressPool
	gatewayStatusEndpoints                    []string
	// adapterLoadTimeout and adapterConcurrency tune the ModelAdapter controller.
	adapterLoadTimeout time.Duration
	adapterConcurrency int
}

func main() {
	var o options
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8083", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8084", "Address of /healthz and /readyz.")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "Elect one active manager among replicas with a Lease.")
	flag.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "switchboard-system",
		"Namespace of the leader-election Lease (outside a cluster it must be set).")
	flag.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second,
		"How long a standby waits after the leader's last renewal before taking its Lease.")
	flag.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second,
		"How long the leader retries renewing its Lease before it stops leading (and exits).")
	flag.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second,
		"How often replicas try to acquire or renew the Lease.")
	flag.DurationVar(&o.adapterLoadTimeout, "adapter-load-timeout", modeladapter.DefaultLoadTimeout,
		"Longest one engine may take to load a LoRA adapter before that load fails and is retried.")
	flag.IntVar(&o.adapterConcurrency, "adapter-max-concurrent-reconciles", modeladapter.DefaultMaxConcurrentReconciles,
		"ModelAdapters reconciled at once, so that a slow engine delays only its own adapters.")
	pool := gatewaystatus.DefaultAddressPool
	flag.Func("gateway-address-pool",
		"Addresses for Gateways without spec.addresses: a CIDR prefix (127.0.1.0/24) or a range first-last (default "+pool+").",
		func(s string) error { pool = s; return nil })
	flag.Func("gateway-status-endpoints",
		"Comma-separated host:port of the gateway replicas' metrics endpoints, where each reports the Gateway addresses and ports it cannot bind; "+
			"a host name stands for every address it resolves to (a headless Service covers every replica). Empty: only what the manager sees decides whether a Gateway is programmed.",
		func(s string) error {
			for ep := range strings.SplitSeq(s, ",") {
				if ep = strings.TrimSpace(ep); ep != "" {
					if _, _, err := net.SplitHostPort(ep); err != nil {
						return err
					}
					o.gatewayStatusEndpoints = append(o.gatewayStatusEndpoints, ep)
				}
			}
			return nil
		})
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	var err error
	if o.addressPool, err = gatewaystatus.ParseAddressPool(pool); err != nil {
		fmt.Fprintln(os.Stderr, "manager: invalid --gateway-address-pool:", err)
		os.Exit(2)
	}

	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}

// run wires the manager: informers feeding the manager's cache context, the
// reconcilers, and health probes.
func run(o options) error {
	s, err := scheme.New()
	if err != nil {
		return err
	}
	// 1. A manager with leader election: one replica reconciles at a time.
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  s,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "switchboard-manager.inference.switchboard.dev",
		LeaderElectionNamespace: o.leaderElectionNamespace,
		LeaseDuration:           &o.leaseDuration,
		RenewDeadline:           &o.renewDeadline,
		RetryPeriod:             &o.retryPeriod,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// 2. The manager's cache context: engine pods, models and adapters.
	view, err := cache.InitForManager(mgr)
	if err != nil {
		return err
	}
	// 3. ModelAdapter placement and LoRA lifecycle.
	adapters := &modeladapter.Reconciler{Client: mgr.GetClient(), Pods: view,
		LoadTimeout: o.adapterLoadTimeout, MaxConcurrentReconciles: o.adapterConcurrency}
	if err := adapters.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up ModelAdapter controller: %w", err)
	}
	// 4. RoutingPolicy status: acceptance, attachment and ready endpoints.
	if err := (&policystatus.Reconciler{Client: mgr.GetClient(), Pods: view}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up RoutingPolicy status controller: %w", err)
	}
	// 5. Gateway API status for Switchboard's GatewayClass, its Gateways and HTTPRoutes,
	// the addresses of Gateways without spec.addresses, and what the gateway replicas
	// report they cannot bind.
	status := &gatewaystatus.Reconciler{Client: mgr.GetClient(), AddressPool: o.addressPool}
	if len(o.gatewayStatusEndpoints) > 0 {
		status.Binds = bindreport.NewPoller(bindreport.PollerOptions{Endpoints: o.gatewayStatusEndpoints})
		if err := mgr.Add(status.Binds); err != nil {
			return fmt.Errorf("add gateway bind poller: %w", err)
		}
	}
	if err := status.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up Gateway API status controller: %w", err)
	}
	// 6. Probes: alive once started, ready once the cache holds the cluster's state.
	if err := view.AddProbes(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
