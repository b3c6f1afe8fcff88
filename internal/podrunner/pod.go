package podrunner

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/switchboard-llm/switchboard/internal/podrunner/podconfig"
)

// statusTimeout bounds one status write, and the last one when the runner stops.
const statusTimeout = 5 * time.Second

// podRun runs one pod: it holds the pod's address and directory, supervises a
// goroutine per container and writes the pod's status.
//
// Synchronisation: r, pod, key, dir and log are set by newPodRun and read-only after.
// terminate sets grace and deleting and then closes stopping, once; they are read only
// after stopping is closed. mu guards state; every change to it signals changed, which
// the status writer alone receives from. logs[i] is the log of container i's current
// or last run, stored by its supervisor and loaded by log readers. done is closed when
// run returns: every process has stopped and the address is free.
type podRun struct {
	r   *Runner
	pod *corev1.Pod // as first seen: the spec the containers run with
	key string
	dir string
	log logr.Logger

	stopOnce sync.Once
	stopping chan struct{}
	grace    time.Duration
	deleting bool // the pod is being deleted: remove its directory, skip the last status

	changed chan struct{} // capacity 1
	done    chan struct{}
	logs    []atomic.Pointer[containerLog]

	mu    sync.Mutex
	state podState
}

// newPodRun returns a run of pod that has not started.
func (r *Runner) newPodRun(ctx context.Context, pod *corev1.Pod) *podRun {
	p := &podRun{
		r:        r,
		pod:      pod,
		key:      pod.Namespace + "/" + pod.Name,
		dir:      r.podDir(pod),
		log:      log.FromContext(ctx).WithValues("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID),
		stopping: make(chan struct{}),
		changed:  make(chan struct{}, 1),
		done:     make(chan struct{}),
		logs:     make([]atomic.Pointer[containerLog], len(pod.Spec.Containers)),
	}
	p.state.startTime = now()
	if pod.Status.StartTime != nil {
		p.state.startTime = *pod.Status.StartTime // a pod the runner ran before it restarted
	}
	p.state.containers = make([]containerState, len(pod.Spec.Containers))
	waiting := &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	if len(pod.Spec.InitContainers) > 0 {
		waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing", Message: "init containers are not supported by the local pod runner"}
	}
	for i := range p.state.containers {
		p.state.containers[i].state = corev1.ContainerState{Waiting: waiting.DeepCopy()}
	}
	p.changed <- struct{}{} // the first status is due
	return p
}

// terminate makes the run stop its processes, giving each grace before SIGKILL;
// deleting says the pod is being deleted. Only the first call counts. It does not wait:
// done is closed once the run has stopped, and the pod is queued again.
func (p *podRun) terminate(grace time.Duration, deleting bool) {
	p.stopOnce.Do(func() {
		p.grace, p.deleting = grace, deleting
		close(p.stopping)
	})
}

// sleep waits for d and reports true, or reports false as soon as the run stops.
func (p *podRun) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.stopping:
		return false
	case <-t.C:
		return true
	}
}

// update changes the run's state with f and has the status written.
func (p *podRun) update(f func(*podState)) {
	p.mu.Lock()
	f(&p.state)
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// snapshot returns a copy of the run's state.
func (p *podRun) snapshot() podState {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.state
	s.containers = make([]containerState, len(p.state.containers))
	for i, c := range p.state.containers {
		s.containers[i] = *c.DeepCopy()
	}
	return s
}

// run runs the pod until it is terminated: address and directory first, then a
// supervisor per container. A pod whose containers have all finished for good frees its
// address and waits to be deleted.
func (p *podRun) run() {
	defer p.r.queue.Add(p.key)
	defer close(p.done)
	base := log.IntoContext(context.Background(), p.log)
	var writer sync.WaitGroup
	writerStop := make(chan struct{})
	writer.Go(func() { p.writeStatuses(base, writerStop) })

	// Setting up and configuring containers (API reads) give up when the pod stops.
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	go func() {
		select {
		case <-p.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()

	switch {
	case len(p.pod.Spec.InitContainers) > 0:
		p.log.Info("init containers are not supported; the pod stays Pending")
	case !p.imagesKnown():
		p.log.Info("the pod has images the catalogue does not know; it stays Pending without an address")
		<-p.stopping
	default:
		if vols, ok := p.setUp(ctx); ok {
			var containers sync.WaitGroup
			for i := range p.pod.Spec.Containers {
				containers.Go(func() { p.supervise(ctx, i, vols) })
			}
			containers.Wait()
		}
	}
	p.mu.Lock()
	ip := p.state.ip
	p.mu.Unlock()
	if ip.IsValid() {
		p.r.opts.PodIPs.Release(ip)
	}

	<-p.stopping
	close(writerStop)
	writer.Wait()
	if p.deleting {
		if err := os.RemoveAll(p.dir); err != nil {
			p.log.Error(err, "remove pod directory")
		}
	}
	p.log.Info("pod stopped", "deleted", p.deleting)
}

// imagesKnown reports whether the catalogue knows every container's image; it records
// ErrImagePull for each container whose image it does not know, so that a pod that
// cannot run never takes one of the range's addresses.
func (p *podRun) imagesKnown() bool {
	known := true
	for i := range p.pod.Spec.Containers {
		image := p.pod.Spec.Containers[i].Image
		if _, ok := p.r.opts.Catalogue.Lookup(image); !ok {
			known = false
			p.setContainer(i, func(s *containerState) {
				s.state = waiting("ErrImagePull", p.r.opts.Catalogue.UnknownImageMessage(image))
			})
		}
	}
	return known
}

// setUp gives the pod its address, directory and volumes, retrying with back-off
// until it succeeds or the run stops; meanwhile every container waits in
// ContainerCreating with the reason as its message.
func (p *podRun) setUp(ctx context.Context) (podconfig.Volumes, bool) {
	var b backoff
	for {
		vols, err := p.trySetUp(ctx)
		if err == nil {
			return vols, true
		}
		p.log.Error(err, "set up pod; will retry")
		p.update(func(s *podState) {
			for i := range s.containers {
				s.containers[i].state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
					Reason: "ContainerCreating", Message: err.Error()}}
			}
		})
		if !p.sleep(b.next()) {
			return nil, false
		}
	}
}

// trySetUp allocates the pod's address, keeping the one it had if it is free, and
// writes its directory and volumes.
func (p *podRun) trySetUp(ctx context.Context) (podconfig.Volumes, error) {
	p.mu.Lock()
	ip := p.state.ip
	p.mu.Unlock()
	if !ip.IsValid() {
		pool := p.r.opts.PodIPs
		if prev, err := netip.ParseAddr(p.pod.Status.PodIP); err == nil && pool.Claim(prev) {
			ip = prev
		} else if ip, err = pool.Allocate(); err != nil {
			return nil, err
		}
		p.update(func(s *podState) { s.ip = ip })
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return nil, err
	}
	vols, err := podconfig.WriteVolumes(ctx, p.r.objects, p.pod, filepath.Join(p.dir, "volumes"))
	if err != nil {
		return nil, fmt.Errorf("mount volumes: %w", err)
	}
	return vols, nil
}

// writeStatuses writes the pod's status whenever the state changes, retrying failed
// writes every second, until stop is closed; then, unless the pod is being deleted, it
// writes the last status.
func (p *podRun) writeStatuses(ctx context.Context, stop <-chan struct{}) {
	var retryC <-chan time.Time
	for {
		select {
		case <-p.changed:
		case <-retryC:
		case <-stop:
			if !p.deleting {
				if err := p.writeStatus(ctx); err != nil {
					p.log.Error(err, "write the last pod status")
				}
			}
			return
		}
		retryC = nil
		if err := p.writeStatus(ctx); err != nil {
			p.log.Error(err, "write pod status; will retry")
			retryC = time.After(time.Second)
		}
	}
}

// writeStatus writes the status the run's state gives to the pod, unless it has it
// already, is gone, or is no longer the pod this run runs on this node.
func (p *podRun) writeStatus(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	pods := p.r.client.CoreV1().Pods(p.pod.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, p.pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get pod: %w", err)
		}
		if cur.UID != p.pod.UID || cur.Spec.NodeName != p.r.opts.NodeName {
			return nil
		}
		status := podStatus(cur, p.snapshot(), now())
		if equality.Semantic.DeepEqual(cur.Status, status) {
			return nil
		}
		cur.Status = status
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("update pod status: %w", err)
		}
		return err
	})
}

// backoff is the delay before a retry: 1s, doubling up to maxBackoff.
type backoff struct{ last time.Duration }

// maxBackoff caps backoff.
const maxBackoff = 10 * time.Second

// next returns the delay before the next retry.
func (b *backoff) next() time.Duration {
	b.last = min(max(time.Second, 2*b.last), maxBackoff)
	return b.last
}

// reset starts the delays from 1s again.
func (b *backoff) reset() { b.last = 0 }

// now is the current time at the precision the API server keeps.
func now() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }
