package podrunner

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/switchboard-llm/switchboard/internal/podrunner/catalogue"
	"github.com/switchboard-llm/switchboard/internal/podrunner/podconfig"
)

// noObjects is a cluster without Secrets or ConfigMaps.
type noObjects struct{}

func (noObjects) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func (noObjects) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

// preparedRun is a run of pod at 127.0.2.7 with its directory under /state.
func preparedRun(pod *corev1.Pod) *podRun {
	r := &Runner{opts: Options{BinDir: "/bin-dir", StateDir: "/state", Catalogue: catalogue.Default()}, objects: noObjects{}}
	p := r.newPodRun(context.Background(), pod)
	p.state.ip = netip.MustParseAddr("127.0.2.7")
	return p
}

// envOf parses "NAME=value" pairs.
func envOf(list []string) map[string]string {
	env := map[string]string{}
	for _, kv := range list {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

func TestPrepareEchoBasicGetsFreePortsPublishedAsItsOwn(t *testing.T) {
	t.Setenv("RUNNER_ONLY", "x")
	pod := testPod("echo")
	c := &pod.Spec.Containers[0]
	c.Image = catalogue.EchoBasic + ":v1.5.1"
	c.Command = []string{"/ignored"}
	c.Env = []corev1.EnvVar{
		{Name: "TLS_SERVER_CERT", Value: "/etc/secret-volume/crt"},
		{Name: "TLS_SERVER_PRIVKEY", Value: "/etc/secret-volume/key"},
		{Name: "H2C_PORT", Value: "4001"},
	}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/secret-volume"}}
	p := preparedRun(pod)
	prog, _ := p.r.opts.Catalogue.Lookup(c.Image)

	l, err := p.prepare(context.Background(), c, prog, podconfig.Volumes{"tls": "/state/ns_p_u/volumes/tls"})
	if err != nil {
		t.Fatal(err)
	}
	if l.path != "/bin-dir/echo-basic" || len(l.args) != 0 || l.dir != p.dir || l.logPath != p.dir+"/echo.log" {
		t.Errorf("launch = %+v, want echo-basic without args in the pod directory", l)
	}
	env := envOf(l.env)
	if env["TLS_SERVER_CERT"] != "/state/ns_p_u/volumes/tls/crt" || env["TLS_SERVER_PRIVKEY"] != "/state/ns_p_u/volumes/tls/key" {
		t.Errorf("TLS paths = %q, %q; want them under the volume's directory", env["TLS_SERVER_CERT"], env["TLS_SERVER_PRIVKEY"])
	}
	if _, ok := env["RUNNER_ONLY"]; ok || env["PATH"] == "" || env["HOSTNAME"] != "p" {
		t.Errorf("environment %v: want PATH and HOSTNAME but none of the runner's own variables", env)
	}
	wantPorts := map[string]string{"HTTP_PORT": "127.0.2.7:3000", "H2C_PORT": "127.0.2.7:4001", "HTTPS_PORT": "127.0.2.7:8443"}
	if len(l.forwards) != len(wantPorts) {
		t.Fatalf("forwards = %+v, want %d", l.forwards, len(wantPorts))
	}
	for _, f := range l.forwards {
		var name string
		for n, addr := range wantPorts {
			if addr == f.pod {
				name = n
			}
		}
		if name == "" {
			t.Errorf("unexpected forward %+v", f)
			continue
		}
		if port, err := strconv.Atoi(env[name]); err != nil || f.program != "127.0.0.1:"+env[name] || port == 3000 || port == 4001 || port == 8443 {
			t.Errorf("%s=%s, forward %+v: want a free port, relayed from %s", name, env[name], f, f.pod)
		}
		if !slices.Contains(l.ports, f.pod) {
			t.Errorf("ports %v lack %s", l.ports, f.pod)
		}
	}
}

func TestPrepareEngineSimListensOnThePodIP(t *testing.T) {
	pod := testPod("engine")
	c := &pod.Spec.Containers[0]
	c.Image = catalogue.EngineSim
	c.Args = []string{"--model", "$(MODEL)", "--lora-modules", "sql=/models/sql"}
	c.Env = []corev1.EnvVar{{Name: "MODEL", Value: "llama"}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "models", MountPath: "/models"}}
	c.WorkingDir = "/models"
	p := preparedRun(pod)
	prog, _ := p.r.opts.Catalogue.Lookup(c.Image)
	vols := podconfig.Volumes{"models": "/state/v/models"}

	l, err := p.prepare(context.Background(), c, prog, vols)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--model", "llama", "--lora-modules", "sql=/models/sql", "--listen", "127.0.2.7:8000"}
	if !slices.Equal(l.args, want) || l.path != "/bin-dir/engine-sim" || l.dir != "/state/v/models" {
		t.Errorf("launch = %+v, want args %q, engine-sim, in the models volume", l, want)
	}
	if len(l.forwards) != 0 || !slices.Equal(l.ports, []string{"127.0.2.7:8000"}) {
		t.Errorf("forwards %v, ports %v; want none, and the listen address", l.forwards, l.ports)
	}

	c.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9000, Protocol: corev1.ProtocolUDP}, {Name: "http", ContainerPort: 8123}}
	c.WorkingDir = "/app"
	if l, err = p.prepare(context.Background(), c, prog, vols); err != nil {
		t.Fatal(err)
	}
	if got := l.args[len(l.args)-1]; got != "127.0.2.7:8123" || l.dir != p.dir {
		t.Errorf("listen address %s in %s, want the first TCP port, 127.0.2.7:8123, in the pod directory", got, l.dir)
	}
}

func TestPrepareFailures(t *testing.T) {
	for name, change := range map[string]func(*corev1.Container){
		"udp mode": func(c *corev1.Container) { c.Env = []corev1.EnvVar{{Name: "UDP_ECHO_SERVER", Value: "1"}} },
		"bad port": func(c *corev1.Container) { c.Env = []corev1.EnvVar{{Name: "HTTP_PORT", Value: "web"}} },
		"missing secret": func(c *corev1.Container) {
			c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}
		},
		"unknown volume": func(c *corev1.Container) { c.VolumeMounts = []corev1.VolumeMount{{Name: "nope", MountPath: "/x"}} },
	} {
		pod := testPod("echo")
		c := &pod.Spec.Containers[0]
		c.Image = catalogue.EchoBasic
		change(c)
		p := preparedRun(pod)
		prog, _ := p.r.opts.Catalogue.Lookup(c.Image)
		if l, err := p.prepare(context.Background(), c, prog, podconfig.Volumes{}); err == nil {
			t.Errorf("%s: prepare = %+v, want an error", name, l)
		}
	}
}

func TestShouldRestart(t *testing.T) {
	for _, tt := range []struct {
		policy corev1.RestartPolicy
		code   int32
		want   bool
	}{
		{corev1.RestartPolicyAlways, 0, true}, {corev1.RestartPolicyAlways, 1, true}, {"", 0, true},
		{corev1.RestartPolicyOnFailure, 0, false}, {corev1.RestartPolicyOnFailure, 137, true},
		{corev1.RestartPolicyNever, 0, false}, {corev1.RestartPolicyNever, 1, false},
	} {
		p := preparedRun(&corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: tt.policy}})
		if got := p.shouldRestart(tt.code); got != tt.want {
			t.Errorf("restartPolicy %q, exit %d: restart = %v, want %v", tt.policy, tt.code, got, tt.want)
		}
	}
}

func TestContainerPort(t *testing.T) {
	c := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}}
	for port, want := range map[string]int{"http": 8000, "9000": 9000} {
		if got, err := containerPort(c, intstr.Parse(port)); err != nil || got != want {
			t.Errorf("containerPort(%s) = %d, %v; want %d", port, got, err, want)
		}
	}
	if got, err := containerPort(c, intstr.FromString("grpc")); err == nil {
		t.Errorf("containerPort(grpc) = %d, want an error", got)
	}
}

func TestSchedulable(t *testing.T) {
	r := &Runner{opts: Options{NodeName: "local"}}
	base := func() *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	}
	for name, tt := range map[string]struct {
		change func(*corev1.Pod)
		want   bool
	}{
		"unscheduled":            {func(*corev1.Pod) {}, true},
		"default scheduler":      {func(p *corev1.Pod) { p.Spec.SchedulerName = corev1.DefaultSchedulerName }, true},
		"matching node selector": {func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "local"} }, true},
		"other scheduler":        {func(p *corev1.Pod) { p.Spec.SchedulerName = "custom" }, false},
		"other node selector":    {func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "b"} }, false},
		"bound":                  {func(p *corev1.Pod) { p.Spec.NodeName = "b" }, false},
		"deleted":                {func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }, false},
		"failed":                 {func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, false},
	} {
		pod := base()
		tt.change(pod)
		if got := r.schedulable(pod); got != tt.want {
			t.Errorf("%s: schedulable = %v, want %v", name, got, tt.want)
		}
	}
}

func TestGracePeriod(t *testing.T) {
	r := &Runner{opts: Options{MaxGracePeriod: DefaultMaxGracePeriod}}
	pod := &corev1.Pod{}
	if got := r.gracePeriod(pod); got != DefaultMaxGracePeriod {
		t.Errorf("default grace = %v, want the cap %v", got, DefaultMaxGracePeriod)
	}
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3)
	if got := r.gracePeriod(pod); got.Seconds() != 3 {
		t.Errorf("spec grace = %v, want 3s", got)
	}
	pod.DeletionGracePeriodSeconds = ptr.To[int64](1)
	if got := r.gracePeriod(pod); got.Seconds() != 1 {
		t.Errorf("deletion grace = %v, want 1s", got)
	}
}

func TestIsUID(t *testing.T) {
	for s, want := range map[string]bool{
		"4238bf37-f84f-4af3-babc-b751cb5c91fe": true,
		"4238bf37-f84f-4af3-babc-b751cb5c91f":  false,
		"4238bf37f84f-4af3-babc-b751cb5c91fe0": false,
		"4238BF37-f84f-4af3-babc-b751cb5c91fe": false,
		"":                                     false,
	} {
		if got := isUID(s); got != want {
			t.Errorf("isUID(%q) = %v, want %v", s, got, want)
		}
	}
}
