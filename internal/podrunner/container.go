package podrunner

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchboard-llm/switchboard/internal/podrunner/catalogue"
	"github.com/switchboard-llm/switchboard/internal/podrunner/podconfig"
	"github.com/switchboard-llm/switchboard/internal/podrunner/tcpforward"
)

// resetBackoffAfter is how long a process must run for its next restart to come
// without delay's growth: a crash after that starts the back-off from 1s again.
const resetBackoffAfter = 10 * time.Second

// launch is how to start one container's process.
type launch struct {
	path    string
	args    []string
	env     []string
	dir     string
	logPath string
	// forwards relay the ports the program would serve in a real pod, on the pod IP,
	// to the free ports it was given instead.
	forwards []forward
	// ports are the addresses on the pod IP the container serves once it is up.
	ports []string
}

// forward relays connections to pod (on the pod IP) to program (on 127.0.0.1).
type forward struct{ pod, program string }

// supervise runs container i until the pod stops, restarting its process as the pod's
// restartPolicy says, and records every change of its state.
func (p *podRun) supervise(ctx context.Context, i int, vols podconfig.Volumes) {
	c := &p.pod.Spec.Containers[i]
	prog, _ := p.r.opts.Catalogue.Lookup(c.Image) // known: run checked every image
	var b backoff
	for {
		l, err := p.prepare(ctx, c, prog, vols)
		if err != nil {
			p.log.Error(err, "configure container; will retry", "container", c.Name)
			p.setContainer(i, func(s *containerState) { s.state = waiting("CreateContainerConfigError", err.Error()) })
			if !p.sleep(b.next()) {
				return
			}
			continue
		}
		started := time.Now()
		term := p.runProcess(ctx, i, c, l)
		restart := p.shouldRestart(term.ExitCode)
		stopping := p.isStopping()
		p.setContainer(i, func(s *containerState) {
			s.state, s.ready = corev1.ContainerState{Terminated: term}, false
			s.finished = !restart && !stopping
		})
		p.log.Info("container exited", "container", c.Name, "exitCode", term.ExitCode, "reason", term.Reason, "restart", restart && !stopping)
		if stopping || !restart {
			return
		}
		if time.Since(started) >= resetBackoffAfter {
			b.reset()
		}
		delay := b.next()
		p.setContainer(i, func(s *containerState) {
			s.last = s.state
			s.state = waiting("CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", delay, c.Name, p.pod.Name))
		})
		if !p.sleep(delay) {
			return
		}
		p.setContainer(i, func(s *containerState) { s.restarts++ })
	}
}

// setContainer changes container i's state with f.
func (p *podRun) setContainer(i int, f func(*containerState)) {
	p.update(func(s *podState) { f(&s.containers[i]) })
}

// isStopping reports whether the run is stopping.
func (p *podRun) isStopping() bool {
	select {
	case <-p.stopping:
		return true
	default:
		return false
	}
}

// shouldRestart reports whether a container that exited with code restarts.
func (p *podRun) shouldRestart(code int32) bool {
	switch p.pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}

// prepare works out how to start container c as prog: its arguments and environment
// with paths rewritten, and, for a program that binds wildcard addresses, free ports
// for it and the forwards that publish them on the pod IP as the ports the program
// would serve in a pod.
func (p *podRun) prepare(ctx context.Context, c *corev1.Container, prog catalogue.Program, vols podconfig.Volumes) (*launch, error) {
	ip := p.snapshot().ip.String()
	env, err := podconfig.Env(ctx, p.r.objects, podconfig.Pod{Pod: p.pod, PodIP: ip, HostIP: hostIP}, c)
	if err != nil {
		return nil, err
	}
	mounts, err := vols.Mounts(c)
	if err != nil {
		return nil, err
	}
	l := &launch{
		path:    filepath.Join(p.r.opts.BinDir, prog.Binary),
		dir:     p.dir,
		logPath: logPath(p.dir, c.Name),
	}
	if c.WorkingDir != "" {
		if dir := podconfig.Rewrite(c.WorkingDir, mounts); dir != c.WorkingDir {
			l.dir = dir
		}
	}
	// A container sees its own environment, not the runner's: only PATH is inherited.
	procEnv := &podconfig.Environment{}
	procEnv.Set("PATH", os.Getenv("PATH"))
	procEnv.Set("HOME", p.dir)
	procEnv.Set("HOSTNAME", p.pod.Name)
	for _, name := range env.Names() {
		procEnv.Set(name, podconfig.Rewrite(env.Get(name), mounts))
	}
	for _, a := range c.Args {
		l.args = append(l.args, podconfig.Rewrite(podconfig.Expand(a, env.Lookup), mounts))
	}

	if prog.ListenFlag != "" {
		port := prog.DefaultPort
		for _, cp := range c.Ports {
			if cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP {
				port = cp.ContainerPort
				break
			}
		}
		addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
		l.args = append(l.args, prog.ListenFlag, addr)
		l.ports = append(l.ports, addr)
	}
	published, err := prog.WildcardPorts(procEnv.Get)
	if err != nil {
		return nil, err
	}
	for _, pp := range published {
		free, err := freePort()
		if err != nil {
			return nil, err
		}
		procEnv.Set(pp.Env, strconv.Itoa(free))
		podAddr := net.JoinHostPort(ip, strconv.Itoa(int(pp.Port)))
		l.forwards = append(l.forwards, forward{pod: podAddr, program: net.JoinHostPort("127.0.0.1", strconv.Itoa(free))})
		l.ports = append(l.ports, podAddr)
	}
	l.env = procEnv.List()
	return l, nil
}

// freePort returns a TCP port that was free on every address a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// runProcess starts container i's process as l says, records it running, publishes
// its forwarded ports once the program listens on them and watches its readiness, until
// it exits or the pod stops (then it gets SIGTERM, and SIGKILL after the grace period).
// It returns how the process ended.
func (p *podRun) runProcess(ctx context.Context, i int, c *corev1.Container, l *launch) *corev1.ContainerStateTerminated {
	proc, err := startProcess(l)
	if err != nil {
		t := now()
		p.log.Error(err, "start container", "container", c.Name)
		return &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: t, FinishedAt: t}
	}
	startedAt := now()
	p.logs[i].Store(proc.log)
	p.log.Info("container started", "container", c.Name, "pid", proc.pid(), "binary", l.path, "args", l.args)
	p.setContainer(i, func(s *containerState) {
		s.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}
		s.containerID = fmt.Sprintf("pod-runner://%d", proc.pid())
		s.ready = false
	})

	// The pod's published ports and readiness outlive a stop request: connections in
	// flight drain through them during the grace period.
	procCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var helpers sync.WaitGroup
	publishFailed := make(chan error, len(l.forwards))
	for _, f := range l.forwards {
		helpers.Go(func() {
			if err := publish(procCtx, f); err != nil {
				publishFailed <- err
			}
		})
	}
	helpers.Go(func() { p.watchReadiness(procCtx, i, c, l.ports) })

	var message string
	select {
	case <-proc.exited:
	case <-p.stopping:
		proc.stop(p.grace)
	case err := <-publishFailed:
		message = err.Error()
		p.log.Error(err, "publish container port", "container", c.Name)
		proc.stop(0)
	}
	cancel()
	helpers.Wait()

	term := proc.termination(startedAt, now())
	if message != "" {
		term.Message = message
	} else if term.ExitCode != 0 && !p.isStopping() {
		term.Message = proc.logTail()
	}
	return term
}

// publish waits until the program accepts connections on f.program, then relays
// f.pod to it until ctx ends. It fails if f.pod cannot be listened on.
func publish(ctx context.Context, f forward) error {
	for !accepts(ctx, f.program) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	fw, err := tcpforward.Listen(f.pod, f.program)
	if err != nil {
		return fmt.Errorf("publish port: %w", err)
	}
	<-ctx.Done()
	_ = fw.Close()
	return nil
}

// accepts reports whether addr accepts TCP connections.
func accepts(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// waiting returns a waiting state with reason and message.
func waiting(reason, message string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
}
