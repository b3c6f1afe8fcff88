package cache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// podObject builds a corev1.Pod fixture: by default a Running, Ready vLLM engine pod
// "ns/<name>" serving llama at 10.0.0.1.
type podObject struct{ pod *corev1.Pod }

func makePodObject(name string) *podObject {
	return &podObject{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name,
			Labels: map[string]string{v1alpha1.LabelModel: "llama", "app": "llama"},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}}
}

func (b *podObject) Label(k, v string) *podObject { b.pod.Labels[k] = v; return b }
func (b *podObject) Unlabel(k string) *podObject  { delete(b.pod.Labels, k); return b }
func (b *podObject) IP(ip string) *podObject      { b.pod.Status.PodIP = ip; return b }
func (b *podObject) Phase(p corev1.PodPhase) *podObject {
	b.pod.Status.Phase = p
	return b
}
func (b *podObject) NotReady() *podObject {
	b.pod.Status.Conditions[0].Status = corev1.ConditionFalse
	return b
}
func (b *podObject) Terminating() *podObject {
	now := metav1.Now()
	b.pod.DeletionTimestamp = &now
	b.pod.Finalizers = []string{"test/hold"}
	return b
}
func (b *podObject) Build() *corev1.Pod { return b.pod }

// testScheme knows the kinds the feeds read.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// reconcileWith makes f read objs (the informer cache's state) and reconciles key.
func reconcileWith[T client.Object](t *testing.T, f *feed[T], key types.NamespacedName, objs ...client.Object) error {
	t.Helper()
	f.reader = fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build()
	_, err := f.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
	return err
}

func TestPodFeed(t *testing.T) {
	p1 := types.NamespacedName{Namespace: "ns", Name: "p1"}
	tests := []struct {
		name string
		// states are the successive states of pod p1 seen by the informer; nil means
		// deleted. The feed reconciles p1 after each.
		states []*podObject
		// wantPod is the expected cached pod p1, nil if absent.
		wantPod *endpoint.Endpoint
		// wantModels maps each model to the names of its endpoints.
		wantModels map[string][]string
		wantErr    bool
	}{
		{
			name:       "add",
			states:     []*podObject{makePodObject("p1")},
			wantPod:    &endpoint.Endpoint{Address: "10.0.0.1", Port: 8000, BaseModel: "llama", Engine: endpoint.EngineVLLM, Ready: true},
			wantModels: map[string][]string{"llama": {"p1"}},
		},
		{
			name:       "IP change",
			states:     []*podObject{makePodObject("p1"), makePodObject("p1").IP("10.0.0.9")},
			wantPod:    &endpoint.Endpoint{Address: "10.0.0.9", Port: 8000, BaseModel: "llama", Engine: endpoint.EngineVLLM, Ready: true},
			wantModels: map[string][]string{"llama": {"p1"}},
		},
		{
			name:       "relabelled to another model",
			states:     []*podObject{makePodObject("p1"), makePodObject("p1").Label(v1alpha1.LabelModel, "mistral")},
			wantPod:    &endpoint.Endpoint{Address: "10.0.0.1", Port: 8000, BaseModel: "mistral", Engine: endpoint.EngineVLLM, Ready: true},
			wantModels: map[string][]string{"mistral": {"p1"}},
		},
		{
			name:       "model label removed",
			states:     []*podObject{makePodObject("p1"), makePodObject("p1").Unlabel(v1alpha1.LabelModel)},
			wantModels: map[string][]string{},
		},
		{
			name:       "readiness lost",
			states:     []*podObject{makePodObject("p1"), makePodObject("p1").NotReady()},
			wantPod:    &endpoint.Endpoint{Address: "10.0.0.1", Port: 8000, BaseModel: "llama", Engine: endpoint.EngineVLLM},
			wantModels: map[string][]string{},
		},
		{
			name:       "readiness regained",
			states:     []*podObject{makePodObject("p1").NotReady(), makePodObject("p1")},
			wantPod:    &endpoint.Endpoint{Address: "10.0.0.1", Port: 8000, BaseModel: "llama", Engine: endpoint.EngineVLLM, Ready: true},
			wantModels: map[string][]string{"llama": {"p1"}},
		},
		{
			name:       "not running",
			states:     []*podObject{makePodObject("p1").Phase(corev1.PodPending).IP("")},
			wantPod:    &endpoint.Endpoint{Port: 8000, BaseModel: "llama", Engine: endpoint.EngineVLLM},
			wantModels: map[string][]string{},
		},
		{
			name:       "terminating",
			states:     []*podObject{makePodObject("p1"), makePodObject("p1").Terminating()},
			wantPod:    &endpoint.Endpoint{Address: "10.0.0.1", Port: 8000, BaseModel: "llama", Engine: endpoint.EngineVLLM, Ready: true, Terminating: true},
			wantModels: map[string][]string{},
		},
		{
			name:       "deleted",
			states:     []*podObject{makePodObject("p1"), nil},
			wantModels: map[string][]string{},
		},
		{
			// A delete seen only as a tombstone (the watch missed it) still ends with a
			// reconcile of the key, which finds nothing.
			name:       "deleted while the watch was down",
			states:     []*podObject{makePodObject("p1"), makePodObject("p1").IP("10.0.0.2"), nil},
			wantModels: map[string][]string{},
		},
		{
			name:       "SGLang on a custom port",
			states:     []*podObject{makePodObject("p1").Label(v1alpha1.LabelEngine, "sglang").Label(v1alpha1.LabelPort, "30000")},
			wantPod:    &endpoint.Endpoint{Address: "10.0.0.1", Port: 30000, BaseModel: "llama", Engine: endpoint.EngineSGLang, Ready: true},
			wantModels: map[string][]string{"llama": {"p1"}},
		},
		{
			name:       "invalid port label",
			states:     []*podObject{makePodObject("p1"), makePodObject("p1").Label(v1alpha1.LabelPort, "http")},
			wantModels: map[string][]string{},
			wantErr:    true,
		},
		{
			name:       "unknown engine label",
			states:     []*podObject{makePodObject("p1").Label(v1alpha1.LabelEngine, "tgi")},
			wantModels: map[string][]string{},
			wantErr:    true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New()
			f := podFeed(c)
			var err error
			for _, state := range tt.states {
				var objs []client.Object
				if state != nil {
					objs = append(objs, state.Build())
				}
				err = reconcileWith(t, f, p1, objs...)
			}
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("Reconcile() error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr && !errors.Is(err, reconcile.TerminalError(nil)) {
				t.Errorf("Reconcile() error = %v, want a terminal error", err)
			}
			p, ok := c.Pod(endpoint.Key{Namespace: "ns", Name: "p1"})
			switch {
			case ok != (tt.wantPod != nil):
				t.Fatalf("pod cached = %v, want %v", ok, tt.wantPod != nil)
			case ok:
				got := p.Endpoint
				got.Key, got.Labels = endpoint.Key{}, nil
				if !equalEndpoints(got, *tt.wantPod) {
					t.Errorf("cached pod = %+v, want %+v", got, *tt.wantPod)
				}
			}
			if got := c.Models(); !slices.Equal(got, sortedKeys(tt.wantModels)) {
				t.Errorf("Models() = %v, want %v", got, sortedKeys(tt.wantModels))
			}
			for model, want := range tt.wantModels {
				if got := podNames(c.Reader, model); !slices.Equal(got, want) {
					t.Errorf("endpoints of %s = %v, want %v", model, got, want)
				}
			}
		})
	}
}

// equalEndpoints compares the fields of endpoints other than their maps and slices, and
// their adapters.
func equalEndpoints(a, b endpoint.Endpoint) bool {
	as, bs := a.Adapters, b.Adapters
	a.Adapters, b.Adapters = nil, nil
	a.Labels, b.Labels = nil, nil
	return a.Key == b.Key && a.Address == b.Address && a.Port == b.Port && a.BaseModel == b.BaseModel &&
		a.Engine == b.Engine && a.Ready == b.Ready && a.Terminating == b.Terminating && slices.Equal(as, bs)
}

// sortedKeys returns the keys of m in order.
func sortedKeys(m map[string][]string) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestPodFeedMetricsFollowAddress(t *testing.T) {
	c := New()
	f := podFeed(c)
	p1 := types.NamespacedName{Namespace: "ns", Name: "p1"}
	key := endpoint.Key{Namespace: "ns", Name: "p1"}
	if err := reconcileWith(t, f, p1, makePodObject("p1").Build()); err != nil {
		t.Fatal(err)
	}
	scraped, _ := c.Pod(key)
	c.SetMetrics(scraped, endpoint.Metrics{Running: 3})
	if err := reconcileWith(t, f, p1, makePodObject("p1").NotReady().Build()); err != nil {
		t.Fatal(err)
	}
	if p, _ := c.Pod(key); p.Metrics() == nil || p.Metrics().Running != 3 {
		t.Errorf("metrics lost on a readiness change: %+v", p.Metrics())
	}
	if err := reconcileWith(t, f, p1, makePodObject("p1").IP("10.0.0.2").Build()); err != nil {
		t.Fatal(err)
	}
	if p, _ := c.Pod(key); p.Metrics() != nil {
		t.Errorf("metrics of the old address kept after an IP change: %+v", p.Metrics())
	}
}

func TestEnginePodsPredicate(t *testing.T) {
	engine, other := makePodObject("p1").Build(), makePodObject("p2").Unlabel(v1alpha1.LabelModel).Build()
	if !EnginePods.Create(event.CreateEvent{Object: engine}) || EnginePods.Create(event.CreateEvent{Object: other}) {
		t.Error("create events: want engine pods only")
	}
	if !EnginePods.Delete(event.DeleteEvent{Object: engine}) || EnginePods.Delete(event.DeleteEvent{Object: other}) {
		t.Error("delete events: want engine pods only")
	}
	if !EnginePods.Update(event.UpdateEvent{ObjectOld: engine, ObjectNew: other}) {
		t.Error("an update removing the model label must pass, so that the pod is removed")
	}
	if EnginePods.Update(event.UpdateEvent{ObjectOld: other, ObjectNew: other}) {
		t.Error("updates of pods that never were engine pods must not pass")
	}
}

// adapterObject returns a ModelAdapter "ns/<name>" on llama loaded on instances.
func adapterObject(name string, instances ...string) *v1alpha1.ModelAdapter {
	return &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       v1alpha1.ModelAdapterSpec{BaseModel: "llama"},
		Status:     v1alpha1.ModelAdapterStatus{Instances: instances},
	}
}

func TestAdapterFeed(t *testing.T) {
	sql := types.NamespacedName{Namespace: "ns", Name: "sql-lora"}
	tests := []struct {
		name string
		// states are successive states of the adapter; nil means deleted.
		states     []*v1alpha1.ModelAdapter
		wantModels map[string][]string
	}{
		{
			name:       "instances added",
			states:     []*v1alpha1.ModelAdapter{adapterObject("sql-lora"), adapterObject("sql-lora", "p1", "p2")},
			wantModels: map[string][]string{"llama": {"p1", "p2", "p3"}, "sql-lora": {"p1", "p2"}},
		},
		{
			name:       "instance removed",
			states:     []*v1alpha1.ModelAdapter{adapterObject("sql-lora", "p1", "p2"), adapterObject("sql-lora", "p2")},
			wantModels: map[string][]string{"llama": {"p1", "p2", "p3"}, "sql-lora": {"p2"}},
		},
		{
			name:       "last instance removed",
			states:     []*v1alpha1.ModelAdapter{adapterObject("sql-lora", "p1"), adapterObject("sql-lora")},
			wantModels: map[string][]string{"llama": {"p1", "p2", "p3"}},
		},
		{
			name:       "unknown and unready instances are not served",
			states:     []*v1alpha1.ModelAdapter{adapterObject("sql-lora", "p3", "p4", "gone")},
			wantModels: map[string][]string{"llama": {"p1", "p2", "p3"}, "sql-lora": {"p3"}},
		},
		{
			name:       "deleted",
			states:     []*v1alpha1.ModelAdapter{adapterObject("sql-lora", "p1"), nil},
			wantModels: map[string][]string{"llama": {"p1", "p2", "p3"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New()
			for _, name := range []string{"p1", "p2", "p3"} {
				c.UpsertPod(makePod(name).Build())
			}
			c.UpsertPod(makePod("p4").NotReady().Build())
			f := adapterFeed(c)
			for _, state := range tt.states {
				var objs []client.Object
				if state != nil {
					objs = append(objs, state)
				}
				if err := reconcileWith(t, f, sql, objs...); err != nil {
					t.Fatal(err)
				}
			}
			if got := c.Models(); !slices.Equal(got, sortedKeys(tt.wantModels)) {
				t.Errorf("Models() = %v, want %v", got, sortedKeys(tt.wantModels))
			}
			for model, want := range tt.wantModels {
				if got := podNames(c.Reader, model); !slices.Equal(got, want) {
					t.Errorf("endpoints of %s = %v, want %v", model, got, want)
				}
			}
		})
	}
}

func TestServiceSelects(t *testing.T) {
	c := New()
	c.UpsertPod(makePod("p1").Build())
	p, _ := c.Pod(endpoint.Key{Namespace: "ns", Name: "p1"})
	tests := []struct {
		name string
		svc  Service
		want bool
	}{
		{"matching selector", Service{Key: types.NamespacedName{Namespace: "ns"}, Selector: map[string]string{v1alpha1.LabelModel: "llama"}}, true},
		{"other value", Service{Key: types.NamespacedName{Namespace: "ns"}, Selector: map[string]string{v1alpha1.LabelModel: "mistral"}}, false},
		{"missing label", Service{Key: types.NamespacedName{Namespace: "ns"}, Selector: map[string]string{"tier": "gpu"}}, false},
		{"other namespace", Service{Key: types.NamespacedName{Namespace: "other"}, Selector: map[string]string{v1alpha1.LabelModel: "llama"}}, false},
		{"no selector", Service{Key: types.NamespacedName{Namespace: "ns"}}, false},
		{"no selector, endpoint pod", Service{Key: types.NamespacedName{Namespace: "ns"}, EndpointPods: map[string]bool{"p1": true}}, true},
		{"no selector, other endpoint pod", Service{Key: types.NamespacedName{Namespace: "ns"}, EndpointPods: map[string]bool{"p2": true}}, false},
		{"endpoint pod of another namespace", Service{Key: types.NamespacedName{Namespace: "other"}, EndpointPods: map[string]bool{"p1": true}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.svc.Selects(p); got != tt.want {
				t.Errorf("Selects() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestServiceFeedFollowsEndpointSlices checks that a Service without a selector selects
// the pods its EndpointSlices' ready endpoints reference in its own namespace, and no
// others: not endpoints that are not ready, name no pod, or name a pod of another
// namespace, nor the endpoints of another Service's slices.
func TestServiceFeedFollowsEndpointSlices(t *testing.T) {
	s := new(Store[Service])
	f := serviceFeed(s)
	key := types.NamespacedName{Namespace: "ns", Name: "manual"}
	pod := func(ns, name string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name}}
	}
	notReady := pod("ns", "p2")
	notReady.Conditions.Ready = new(false)
	slice := func(name, service string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
		}
	}
	objs := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "manual"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8080}}}},
		slice("manual-a", "manual", pod("ns", "p1"), notReady, pod("other", "p3")),
		slice("manual-b", "manual", discoveryv1.Endpoint{Addresses: []string{"10.0.0.9"}}, pod("", "p5")),
		slice("elsewhere", "other-service", pod("ns", "p4")),
	}
	if err := reconcileWith(t, f, key, objs...); err != nil {
		t.Fatal(err)
	}
	got, ok := s.Get(key)
	if want := map[string]bool{"p1": true, "p5": true}; !ok || !maps.Equal(got.EndpointPods, want) {
		t.Fatalf("EndpointPods = %v (stored %v), want %v", got.EndpointPods, ok, want)
	}
	if reqs := sliceService(context.Background(), objs[1]); len(reqs) != 1 || reqs[0].NamespacedName != key {
		t.Errorf("an EndpointSlice of %s reconciles %v", key, reqs)
	}
	if reqs := sliceService(context.Background(), &discoveryv1.EndpointSlice{}); len(reqs) != 0 {
		t.Errorf("an EndpointSlice of no Service reconciles %v", reqs)
	}
}

func TestObjectFeedStore(t *testing.T) {
	s := new(Store[*v1alpha1.RoutingPolicy])
	f := policyFeed(s)
	key := types.NamespacedName{Namespace: "ns", Name: "rp"}
	v0 := s.Version()
	policy := &v1alpha1.RoutingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rp"},
		Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest},
	}
	if err := reconcileWith(t, f, key, policy); err != nil {
		t.Fatal(err)
	}
	got, ok := s.Get(key)
	if !ok || got.Spec.Strategy != v1alpha1.StrategyLeastRequest || s.Version() == v0 {
		t.Fatalf("after add: Get() = %v, %v; version %d -> %d", got, ok, v0, s.Version())
	}
	list := s.List()
	if err := reconcileWith(t, f, key); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(key); ok || len(s.List()) != 0 {
		t.Error("policy still stored after delete")
	}
	if len(list) != 1 || list[0].Name != "rp" {
		t.Errorf("a list taken before the delete changed: %v", list)
	}
}

// TestPrimePublishesOneGeneration checks that the initial listing of a kind reaches its
// store as one new generation, all objects at once, rather than one copy of the store
// per object; and that writes after it publish one generation each again.
func TestPrimePublishesOneGeneration(t *testing.T) {
	s := new(Store[*v1alpha1.RoutingPolicy])
	f := policyFeed(s)
	var objs []client.Object
	for i := range 50 {
		objs = append(objs, &v1alpha1.RoutingPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("rp-%d", i)},
			Spec:       v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest},
		})
	}
	f.reader = fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build()
	v0 := s.Version()
	if err := f.prime(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.Version(); got != v0+1 || len(s.List()) != len(objs) {
		t.Fatalf("after priming %d policies: version %d -> %d, %d stored; want one generation holding them all", len(objs), v0, got, len(s.List()))
	}
	s.remove(types.NamespacedName{Namespace: "ns", Name: "rp-0"})
	if got := s.Version(); got != v0+2 || len(s.List()) != len(objs)-1 {
		t.Errorf("a write after priming: version %d, %d stored; want its own generation", got, len(s.List()))
	}
	// A batch that changes nothing publishes nothing.
	s.batch(func() { s.remove(types.NamespacedName{Namespace: "ns", Name: "absent"}) })
	if got := s.Version(); got != v0+2 {
		t.Errorf("an empty batch published generation %d", got)
	}
}

func TestEndpointFromPodReadsDeclaredSlots(t *testing.T) {
	tests := []struct {
		name          string
		command, args []string
		want          int
	}{
		{name: "vLLM flag and value", args: []string{"--model", "llama", "--max-num-seqs", "64"}, want: 64},
		{name: "vLLM flag=value", args: []string{"--max-num-seqs=32"}, want: 32},
		{name: "vLLM flag with underscores", command: []string{"vllm", "serve", "llama"}, args: []string{"--max_num_seqs", "4"}, want: 4},
		{name: "SGLang flag", args: []string{"--max-running-requests", "16"}, want: 16},
		{name: "one shell string", command: []string{"sh", "-c"}, args: []string{"exec vllm serve llama --max-num-seqs 128 --port 8000"}, want: 128},
		{name: "not declared", args: []string{"--model", "llama"}},
		{name: "not a number", args: []string{"--max-num-seqs", "many"}},
		{name: "zero", args: []string{"--max-num-seqs=0"}},
		{name: "no value", args: []string{"--max-num-seqs"}},
		{name: "a longer flag of the same start", args: []string{"--max-num-seqs-per-step", "64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := makePodObject("p1").Build()
			pod.Spec.Containers = []corev1.Container{{Name: "proxy", Args: []string{"--port", "9000"}},
				{Name: "engine", Command: tt.command, Args: tt.args}}
			ep, ok, err := EndpointFromPod(pod)
			if err != nil || !ok {
				t.Fatalf("EndpointFromPod = %v, %v; want an engine endpoint", ok, err)
			}
			if ep.Slots != tt.want {
				t.Errorf("Slots = %d, want %d", ep.Slots, tt.want)
			}
		})
	}
}
