// Command pod-runner plays kubelet for one Node of the local control plane, which has
// no kubelet, container runtime or scheduler: it registers the Node, binds unscheduled
// pods to it and runs their containers as local processes, for the images its
// catalogue knows (see internal/podrunner). It uses an administrator's kubeconfig.
//
// It serves the pods' container logs to the API server (kubectl logs) on
// --kubelet-bind-address, by default on loopback, as kubelet does but without
// authentication unless --kubelet-client-ca-file is given: a local tool's endpoint.
package main

import (
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-llm/switchboard/internal/podrunner"
	"github.com/switchboard-llm/switchboard/internal/podrunner/ipam"
	"github.com/switchboard-llm/switchboard/internal/scheme"
)

// config is the command line; --kubeconfig is registered by controller-runtime.
type config struct {
	runner                 podrunner.Options
	podIPRange             string
	kubeletClientCAFile    string
	metricsAddr, probeAddr string
}

func main() {
	var c config
	flag.StringVar(&c.runner.NodeName, "node-name", "local", "Name of the Node the runner registers and runs the pods of.")
	flag.StringVar(&c.podIPRange, "pod-ip-range", podrunner.DefaultPodIPRange, "Loopback addresses for pods: first-last (inclusive) or a CIDR prefix.")
	flag.StringVar(&c.runner.BinDir, "bin-dir", "bin", "Directory holding the programs the image catalogue names (echo-basic, engine-sim).")
	flag.StringVar(&c.runner.StateDir, "state-dir", "bin/pod-runner", "Directory for the pods' directories: volumes and container logs.")
	flag.DurationVar(&c.runner.HeartbeatInterval, "heartbeat-interval", podrunner.DefaultHeartbeatInterval, "Time between two Node status updates and Lease renewals.")
	flag.DurationVar(&c.runner.MaxGracePeriod, "max-grace-period", podrunner.DefaultMaxGracePeriod, "Longest time a pod's processes get between SIGTERM and SIGKILL.")
	flag.StringVar(&c.runner.KubeletAddr, "kubelet-bind-address", podrunner.DefaultKubeletAddr, "Address (IP:port) of the HTTPS endpoint serving container logs to the API server, without authentication unless --kubelet-client-ca-file is set; the Node advertises it. Port 0 picks a free port; 0 disables it.")
	flag.StringVar(&c.kubeletClientCAFile, "kubelet-client-ca-file", "", "PEM file of the CAs that sign the API server's kubelet client certificate; if set, the kubelet endpoint requires one.")
	flag.StringVar(&c.metricsAddr, "metrics-bind-address", "0", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&c.probeAddr, "health-probe-bind-address", ":8085", "Address of /healthz and /readyz.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "pod-runner:", err)
		os.Exit(1)
	}
}

// run wires the pod runner into a manager that serves its probes, and runs it until
// SIGTERM or SIGINT.
func run(c config) error {
	pool, err := ipam.NewPool(c.podIPRange)
	if err != nil {
		return err
	}
	c.runner.PodIPs = pool
	if c.runner.KubeletAddr == "0" {
		c.runner.KubeletAddr = ""
	}
	if c.kubeletClientCAFile != "" {
		if c.runner.KubeletClientCAs, err = certPool(c.kubeletClientCAFile); err != nil {
			return err
		}
	}
	s, err := scheme.New()
	if err != nil {
		return err
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	// 1. A manager for probes, metrics and signal handling; the runner uses informers of
	//    its own (pods selected by node name). Stopping waits for the pods' processes.
	shutdown := c.runner.MaxGracePeriod + 20*time.Second
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  s,
		Metrics:                 metricsserver.Options{BindAddress: c.metricsAddr},
		HealthProbeBindAddress:  c.probeAddr,
		GracefulShutdownTimeout: &shutdown,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// 2. The runner: the Node, its pods and their processes.
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	runner, err := podrunner.New(client, c.runner)
	if err != nil {
		return err
	}
	if err := mgr.Add(runner); err != nil {
		return fmt.Errorf("add pod runner: %w", err)
	}
	// 3. Probes: alive once started, ready once the Node is registered and pods listed.
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("node", runner.ReadyCheck); err != nil {
		return err
	}
	// 4. Run until SIGTERM or SIGINT.
	return mgr.Start(ctrl.SetupSignalHandler())
}

// certPool reads the PEM certificates in file.
func certPool(file string) (*x509.CertPool, error) {
	pemCerts, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read kubelet client CAs: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCerts) {
		return nil, fmt.Errorf("kubelet client CAs: no PEM certificate in %s", file)
	}
	return pool, nil
}
