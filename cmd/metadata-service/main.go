// Command metadata-service serves Switchboard's read-only metadata API: the models and
// adapters that have ready endpoints, and every engine endpoint with its latest engine
// metrics (see internal/metadata). It only reads from the API server.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/metadata"
	"github.com/switchboard-llm/switchboard/internal/scheme"
)

// config is the command line; --kubeconfig is registered by controller-runtime.
type config struct {
	bindAddr, metricsAddr, probeAddr string
	cache                            cache.Options
	drain                            time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.bindAddr, "bind-address", ":8090", "Address of the metadata API.")
	flag.StringVar(&c.metricsAddr, "metrics-bind-address", ":8091", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&c.probeAddr, "health-probe-bind-address", ":8092", "Address of /healthz and /readyz.")
	flag.DurationVar(&c.cache.Scrape.Interval, "metrics-scrape-interval", cache.DefaultScrapeInterval, "Interval between two scrapes of an engine's /metrics.")
	flag.DurationVar(&c.cache.Scrape.Timeout, "metrics-scrape-timeout", cache.DefaultScrapeTimeout, "Timeout of one engine metrics scrape.")
	flag.IntVar(&c.cache.Scrape.MaxConcurrent, "metrics-scrape-max-concurrent", cache.DefaultScrapeMaxConcurrent, "Engines scraped (or listed) at once.")
	flag.DurationVar(&c.cache.StaleAfter, "metrics-stale-after", 0, "Age beyond which an endpoint's metrics are reported stale; 0 means ten scrape intervals.")
	flag.DurationVar(&c.drain, "drain-timeout", metadata.DefaultDrainTimeout, "Longest wait for in-flight requests on shutdown.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "metadata-service:", err)
		os.Exit(1)
	}
}

// run wires the metadata service: a manager whose informers feed the metadata cache
// context, the API server over that context, and health probes.
func run(c config) error {
	s, err := scheme.New()
	if err != nil {
		return err
	}
	// 1. A manager for informers, probes and metrics; no leader election, since the
	//    service writes nothing and every replica serves.
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  s,
		Metrics:                 metricsserver.Options{BindAddress: c.metricsAddr},
		HealthProbeBindAddress:  c.probeAddr,
		GracefulShutdownTimeout: &c.drain,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// 2. The metadata cache context: pods, adapters and scraped engine metrics.
	view, err := cache.InitForMetadata(mgr, c.cache)
	if err != nil {
		return err
	}
	// 3. The read API over the view, drained on shutdown.
	api := metadata.NewHandler(view, metadata.Options{})
	if err := mgr.Add(metadata.NewServer(api, metadata.ServerOptions{Addr: c.bindAddr, DrainTimeout: c.drain})); err != nil {
		return fmt.Errorf("add metadata API server: %w", err)
	}
	// 4. Probes: alive once started, ready once the cache holds the cluster's state.
	if err := view.AddProbes(mgr); err != nil {
		return err
	}
	// 5. Run until SIGTERM or SIGINT.
	return mgr.Start(ctrl.SetupSignalHandler())
}
