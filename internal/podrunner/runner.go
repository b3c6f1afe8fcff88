package podrunner

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/switchboard-llm/switchboard/internal/podrunner/catalogue"
	"github.com/switchboard-llm/switchboard/internal/podrunner/ipam"
	"github.com/switchboard-llm/switchboard/internal/podrunner/podconfig"
)

// Defaults of Options.
const (
	// DefaultHeartbeatInterval is the time between two Node status updates and Lease
	// renewals.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultMaxGracePeriod caps the grace period of a pod's processes.
	DefaultMaxGracePeriod = 10 * time.Second
	// DefaultPodIPRange is the pod IP range of the pod-runner command.
	DefaultPodIPRange = "127.0.2.1-127.0.2.254"
	// DefaultKubeletAddr is the kubelet endpoint's address of the pod-runner command:
	// kubelet's port, on loopback only.
	DefaultKubeletAddr = "127.0.0.1:10250"
)

// hostIP is every pod's host IP, and the Node's address unless the kubelet endpoint
// listens on another.
const hostIP = "127.0.0.1"

// workers is the number of pods synced at once.
const workers = 4

// Options configure a Runner.
type Options struct {
	// NodeName is the Node the runner registers and runs the pods of. Required.
	NodeName string
	// PodIPs hands out the pods' addresses. Required; no other runner may use its
	// addresses.
	PodIPs *ipam.Pool
	// BinDir holds the catalogue's programs. Required.
	BinDir string
	// StateDir holds a directory per pod. Required.
	StateDir string
	// Catalogue maps images to programs; nil means catalogue.Default().
	Catalogue catalogue.Catalogue
	// HeartbeatInterval is the time between two Node status updates and Lease renewals;
	// zero means DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// MaxGracePeriod caps the time a pod's processes get between SIGTERM and SIGKILL;
	// zero means DefaultMaxGracePeriod.
	MaxGracePeriod time.Duration
	// KubeletAddr is the address, "IP:port" or ":port", of the HTTPS endpoint that
	// serves the pods' container logs to the API server in kubelet's stead, with a
	// self-signed certificate; the Node advertises it (127.0.0.1 for an unspecified
	// IP). Port 0 picks a free port; empty means no endpoint, and no pods/log. Any
	// process that reaches the endpoint can read the logs unless KubeletClientCAs is
	// set: keep it on a loopback address.
	KubeletAddr string
	// KubeletClientCAs, if not nil, makes the kubelet endpoint require a client
	// certificate that one of them signed (the API server's
	// --kubelet-client-certificate).
	KubeletClientCAs *x509.CertPool
}

// Runner plays kubelet for one Node: see the package documentation. Create it with
// New and run it with Start, once.
type Runner struct {
	opts    Options
	client  kubernetes.Interface
	objects podconfig.Objects
	queue   workqueue.TypedRateLimitingInterface[string] // keys of pods to sync
	ready   atomic.Bool                                  // node registered, pods listed

	// Set by Start before any worker runs, and kubelet before the Node is registered;
	// read-only afterwards.
	bound       cache.Indexer // pods bound to the node
	unscheduled cache.Indexer // pods bound to no node
	nodeUID     types.UID
	kubelet     netip.AddrPort // the kubelet endpoint the Node advertises; invalid without one

	mu   sync.Mutex
	runs map[string]*podRun // by pod key; only sync adds and removes entries
}

// New returns a Runner that reaches the API server with client.
func New(client kubernetes.Interface, opts Options) (*Runner, error) {
	if opts.NodeName == "" || opts.PodIPs == nil || opts.BinDir == "" || opts.StateDir == "" {
		return nil, errors.New("podrunner: NodeName, PodIPs, BinDir and StateDir are required")
	}
	var err error
	if opts.BinDir, err = filepath.Abs(opts.BinDir); err != nil {
		return nil, err
	}
	if opts.StateDir, err = filepath.Abs(opts.StateDir); err != nil {
		return nil, err
	}
	if opts.Catalogue == nil {
		opts.Catalogue = catalogue.Default()
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.MaxGracePeriod <= 0 {
		opts.MaxGracePeriod = DefaultMaxGracePeriod
	}
	if opts.KubeletAddr != "" {
		if _, err := parseKubeletAddr(opts.KubeletAddr); err != nil {
			return nil, fmt.Errorf("podrunner: %w", err)
		}
	}
	return &Runner{
		opts:    opts,
		client:  client,
		objects: apiObjects{client},
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		runs:    map[string]*podRun{},
	}, nil
}

// Start registers the Node and runs its pods until ctx ends; then it stops every
// process it started, marks the Node NotReady and returns. It fails only if the state
// directory cannot be created or the kubelet endpoint cannot listen. Until the Node is
// registered it retries, every second.
func (r *Runner) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithValues("node", r.opts.NodeName)
	ctx = log.IntoContext(ctx, logger)
	if err := os.MkdirAll(r.opts.StateDir, 0o755); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}

	// 1. The kubelet endpoint, which answers once the runner is ready (step 4).
	var background sync.WaitGroup
	if r.opts.KubeletAddr != "" {
		ln, addr, err := r.listenKubelet()
		if err != nil {
			return fmt.Errorf("listen on the kubelet address: %w", err)
		}
		r.kubelet = addr
		background.Go(func() { r.serveKubelet(ctx, ln) })
		logger.Info("serving container logs", "kubeletAddress", ln.Addr().String())
	}

	// 2. The Node, Ready, advertising the kubelet endpoint, and its Lease.
	if !r.registerNode(ctx) {
		background.Wait()
		return nil // stopped before the API server could be reached
	}
	background.Go(func() { r.heartbeat(ctx) })

	// 3. Informers for the pods bound to the node and the pods bound to none, both
	//    feeding the queue of pods to sync.
	bound := r.podInformers("spec.nodeName=" + r.opts.NodeName)
	unscheduled := r.podInformers("spec.nodeName=")
	r.bound = r.watch(bound)
	r.unscheduled = r.watch(unscheduled)
	bound.Start(ctx.Done())
	unscheduled.Start(ctx.Done())
	for _, f := range []informers.SharedInformerFactory{bound, unscheduled} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok && ctx.Err() == nil {
				logger.Error(nil, "informer did not sync", "type", typ)
			}
		}
	}

	// 4. Workers that sync pods: bind, run, stop and delete them.
	if ctx.Err() == nil {
		r.removeStaleDirs(ctx)
		r.ready.Store(true)
		logger.Info("running pods", "podIPs", r.opts.PodIPs.String(), "stateDir", r.opts.StateDir)
	}
	var workerGroup sync.WaitGroup
	for range workers {
		workerGroup.Go(func() { r.work(ctx) })
	}

	// 5. On shutdown: no more syncs or log requests, then every pod's processes stopped,
	//    then the Node NotReady.
	<-ctx.Done()
	r.ready.Store(false)
	r.queue.ShutDown()
	workerGroup.Wait()
	bound.Shutdown()
	unscheduled.Shutdown()
	background.Wait()
	r.stopAll()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.updateNodeStatus(stopCtx, false); err != nil {
		logger.Error(err, "mark node NotReady")
	}
	logger.Info("stopped")
	return nil
}

// ReadyCheck passes once the Node is registered and the pods are listed, until the
// runner stops; it is a healthz.Checker.
func (r *Runner) ReadyCheck(*http.Request) error {
	if !r.ready.Load() {
		return errors.New("node not registered or pods not listed yet")
	}
	return nil
}

// podInformers returns an informer factory for the pods that match fieldSelector.
func (r *Runner) podInformers(fieldSelector string) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(r.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = fieldSelector }))
}

// watch queues every change of the factory's pods and returns their store.
func (r *Runner) watch(f informers.SharedInformerFactory) cache.Indexer {
	inf := f.Core().V1().Pods().Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	// AddEventHandler fails only once the informer has stopped.
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	return inf.GetIndexer()
}

// work syncs queued pods until the queue shuts down.
func (r *Runner) work(ctx context.Context) {
	for {
		key, shutdown := r.queue.Get()
		if shutdown {
			return
		}
		if err := r.sync(ctx, key); err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "sync pod; will retry", "pod", key)
			r.queue.AddRateLimited(key)
		} else {
			r.queue.Forget(key)
		}
		r.queue.Done(key)
	}
}

// stopAll stops every pod's processes, keeping the pods' directories, and waits.
func (r *Runner) stopAll() {
	r.mu.Lock()
	runs := make([]*podRun, 0, len(r.runs))
	for _, run := range r.runs {
		runs = append(runs, run)
	}
	r.mu.Unlock()
	for _, run := range runs {
		run.terminate(r.gracePeriod(run.pod), false)
	}
	for _, run := range runs {
		<-run.done
	}
}

// podDir is the directory of pod.
func (r *Runner) podDir(pod *corev1.Pod) string {
	return filepath.Join(r.opts.StateDir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
}

// removeStaleDirs removes the directories of pods that are no longer bound to the
// node, left by a runner that was killed. Only names of the form podDir makes are
// considered.
func (r *Runner) removeStaleDirs(ctx context.Context) {
	entries, err := os.ReadDir(r.opts.StateDir)
	if err != nil {
		log.FromContext(ctx).Error(err, "list state directory")
		return
	}
	live := map[string]bool{}
	for _, obj := range r.bound.List() {
		live[string(obj.(*corev1.Pod).UID)] = true
	}
	for _, e := range entries {
		parts := strings.Split(e.Name(), "_")
		if !e.IsDir() || len(parts) != 3 || !isUID(parts[2]) || live[parts[2]] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(r.opts.StateDir, e.Name())); err != nil {
			log.FromContext(ctx).Error(err, "remove stale pod directory", "dir", e.Name())
		}
	}
}

// isUID reports whether s looks like a Kubernetes UID (a UUID).
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case !strings.ContainsRune("0123456789abcdef", c):
			return false
		}
	}
	return true
}

// apiObjects reads Secrets and ConfigMaps from the API server.
type apiObjects struct{ client kubernetes.Interface }

func (o apiObjects) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return o.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (o apiObjects) ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return o.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}
