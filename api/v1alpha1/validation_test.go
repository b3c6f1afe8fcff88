package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/switchboard-llm/switchboard/api/v1alpha1"
)

// newNamespace creates a namespace for one spec, so specs never see each other's objects.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "api-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { Expect(k8sClient.Delete(ctx, ns)).To(Succeed()) })
	return ns.Name
}

var nameSeq int

func uniqueName(prefix string) string {
	nameSeq++
	return fmt.Sprintf("%s-%d", prefix, nameSeq)
}

// expectAdmission checks the API server's answer to a create: success when wantErr is empty,
// otherwise a rejection whose message contains wantErr.
func expectAdmission(err error, wantErr string) {
	if wantErr == "" {
		Expect(err).NotTo(HaveOccurred())
		return
	}
	Expect(err).To(HaveOccurred())
	Expect(err.Error()).To(ContainSubstring(wantErr))
}

var _ = Describe("RoutingPolicy validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	DescribeTable("admission",
		func(spec v1alpha1.RoutingPolicySpec, wantErr string) {
			rp := &v1alpha1.RoutingPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: uniqueName("rp"), Namespace: ns},
				Spec:       spec,
			}
			expectAdmission(k8sClient.Create(ctx, rp), wantErr)
		},
		Entry("each plain strategy is accepted", v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastKVCache}, ""),
		Entry("an unknown strategy is rejected",
			v1alpha1.RoutingPolicySpec{Strategy: "fastest"}, `spec.strategy: Unsupported value: "fastest"`),
		Entry("weighted with scorers is accepted", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyWeighted,
			Scorers: []v1alpha1.Scorer{
				{Name: v1alpha1.StrategyPrefixCache, Weight: ptr.To[int32](3)},
				{Name: v1alpha1.StrategyLeastRequest},
			},
		}, ""),
		Entry("weighted without scorers is rejected",
			v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyWeighted},
			"spec.scorers must be set when spec.strategy is weighted"),
		Entry("scorers without weighted are rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom,
			Scorers:  []v1alpha1.Scorer{{Name: v1alpha1.StrategyLeastRequest}},
		}, "spec.scorers may only be set when spec.strategy is weighted"),
		Entry("a weighted scorer is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyWeighted,
			Scorers:  []v1alpha1.Scorer{{Name: v1alpha1.StrategyWeighted}},
		}, "scorers[].name must not be weighted"),
		Entry("a negative weight is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyWeighted,
			Scorers:  []v1alpha1.Scorer{{Name: v1alpha1.StrategyRandom, Weight: ptr.To[int32](-1)}},
		}, "spec.scorers[0].weight: Invalid value: -1: spec.scorers[0].weight in body should be greater than or equal to 0"),
		Entry("duplicate scorer names are rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyWeighted,
			Scorers:  []v1alpha1.Scorer{{Name: v1alpha1.StrategyRandom}, {Name: v1alpha1.StrategyRandom}},
		}, "spec.scorers[1]: Duplicate value"),
		Entry("more than eight scorers are rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyWeighted,
			Scorers: []v1alpha1.Scorer{{Name: "random"}, {Name: "round-robin"}, {Name: "least-request"},
				{Name: "least-kv-cache"}, {Name: "least-latency"}, {Name: "throughput"}, {Name: "prefix-cache"},
				{Name: "session-affinity"}, {Name: "weighted"}},
		}, "spec.scorers: Too many: 9: must have at most 8 items"),
		Entry("a weighted fallback is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, Fallback: ptr.To(v1alpha1.StrategyWeighted),
		}, "spec.fallback must not be weighted"),
		Entry("a block size below 4 tokens is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{BlockSize: ptr.To[int32](1)},
		}, "spec.prefixCache.blockSize in body should be greater than or equal to 4"),
		Entry("the smallest block size is accepted", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{BlockSize: ptr.To[int32](4)},
		}, ""),
		Entry("more blocks per endpoint than 256 MiB of index hold are rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{MaxBlocksPerEndpoint: ptr.To[int32](16777216)},
		}, "spec.prefixCache.maxBlocksPerEndpoint in body should be less than or equal to 4194304"),
		Entry("the most blocks per endpoint are accepted", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{MaxBlocksPerEndpoint: ptr.To[int32](4194304)},
		}, ""),
		Entry("zero blocks per endpoint are rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{MaxBlocksPerEndpoint: ptr.To[int32](0)},
		}, "spec.prefixCache.maxBlocksPerEndpoint in body should be greater than or equal to 1"),
		Entry("an oversized block size is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{BlockSize: ptr.To[int32](4096)},
		}, "spec.prefixCache.blockSize in body should be less than or equal to 1024"),
		Entry("a match ratio above one is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{MinMatchRatio: ptr.To("1.5")},
		}, "spec.prefixCache.minMatchRatio in body should match"),
		Entry("a match ratio in range is accepted", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{MinMatchRatio: ptr.To("0.25")},
		}, ""),
		Entry("a zero load-imbalance threshold is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{LoadImbalanceThreshold: ptr.To[int32](0)},
		}, "spec.prefixCache.loadImbalanceThreshold in body should be greater than or equal to 1"),
		Entry("a session header that is not a header name is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategySessionAffinity, SessionAffinity: &v1alpha1.SessionAffinityConfig{Header: ptr.To("x session")},
		}, "spec.sessionAffinity.header in body should match"),
		Entry("too many retry attempts are rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, Retry: &v1alpha1.RetryConfig{Attempts: ptr.To[int32](11)},
		}, "spec.retry.attempts in body should be less than or equal to 10"),
		Entry("negative retry attempts are rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, Retry: &v1alpha1.RetryConfig{Attempts: ptr.To[int32](-1)},
		}, "spec.retry.attempts in body should be greater than or equal to 0"),
		Entry("outlier detection in range is accepted", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, OutlierDetection: &v1alpha1.OutlierDetectionConfig{
				ConsecutiveFailures: ptr.To[int32](1), BaseEjectionTime: &metav1.Duration{Duration: time.Hour},
				MaxEjectionPercent: ptr.To[int32](100)},
		}, ""),
		Entry("zero consecutive failures are rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, OutlierDetection: &v1alpha1.OutlierDetectionConfig{ConsecutiveFailures: ptr.To[int32](0)},
		}, "spec.outlierDetection.consecutiveFailures in body should be greater than or equal to 1"),
		Entry("too many consecutive failures are rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, OutlierDetection: &v1alpha1.OutlierDetectionConfig{ConsecutiveFailures: ptr.To[int32](1001)},
		}, "spec.outlierDetection.consecutiveFailures in body should be less than or equal to 1000"),
		Entry("a base ejection time under a second is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, OutlierDetection: &v1alpha1.OutlierDetectionConfig{
				BaseEjectionTime: &metav1.Duration{Duration: 500 * time.Millisecond}},
		}, "spec.outlierDetection.baseEjectionTime must be between 1s and 1h"),
		Entry("a base ejection time over an hour is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, OutlierDetection: &v1alpha1.OutlierDetectionConfig{
				BaseEjectionTime: &metav1.Duration{Duration: 2 * time.Hour}},
		}, "spec.outlierDetection.baseEjectionTime must be between 1s and 1h"),
		Entry("a max ejection percent over 100 is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, OutlierDetection: &v1alpha1.OutlierDetectionConfig{MaxEjectionPercent: ptr.To[int32](101)},
		}, "spec.outlierDetection.maxEjectionPercent in body should be less than or equal to 100"),
		Entry("a negative max ejection percent is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, OutlierDetection: &v1alpha1.OutlierDetectionConfig{MaxEjectionPercent: ptr.To[int32](-1)},
		}, "spec.outlierDetection.maxEjectionPercent in body should be greater than or equal to 0"),
		Entry("a queue wait within bounds is accepted", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, Queue: &v1alpha1.QueueConfig{MaxWait: &metav1.Duration{Duration: 5 * time.Second}},
		}, ""),
		Entry("a zero queue wait is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, Queue: &v1alpha1.QueueConfig{MaxWait: &metav1.Duration{}},
		}, "spec.queue.maxWait must be between 1ms and 1h"),
		Entry("a queue wait over an hour is rejected", v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyRandom, Queue: &v1alpha1.QueueConfig{MaxWait: &metav1.Duration{Duration: 2 * time.Hour}},
		}, "spec.queue.maxWait must be between 1ms and 1h"),
	)

	It("applies defaults and starts as Accepted=Unknown, reason Pending", func() {
		rp := &v1alpha1.RoutingPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: ns},
			Spec: v1alpha1.RoutingPolicySpec{
				Strategy:         v1alpha1.StrategyWeighted,
				Scorers:          []v1alpha1.Scorer{{Name: v1alpha1.StrategyPrefixCache}},
				PrefixCache:      &v1alpha1.PrefixCacheConfig{},
				SessionAffinity:  &v1alpha1.SessionAffinityConfig{},
				Retry:            &v1alpha1.RetryConfig{},
				OutlierDetection: &v1alpha1.OutlierDetectionConfig{},
			},
		}
		Expect(k8sClient.Create(ctx, rp)).To(Succeed())

		var got v1alpha1.RoutingPolicy
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "defaults"}, &got)).To(Succeed())
		Expect(got.Spec.Fallback).To(HaveValue(Equal(v1alpha1.StrategyLeastRequest)))
		Expect(got.Spec.Scorers[0].Weight).To(HaveValue(BeEquivalentTo(1)))
		Expect(got.Spec.PrefixCache.BlockSize).To(HaveValue(BeEquivalentTo(16)))
		Expect(got.Spec.PrefixCache.MaxBlocksPerEndpoint).To(HaveValue(BeEquivalentTo(65536)))
		Expect(got.Spec.PrefixCache.MinMatchRatio).To(HaveValue(Equal("0")))
		Expect(got.Spec.PrefixCache.LoadImbalanceThreshold).To(HaveValue(BeEquivalentTo(8)))
		Expect(got.Spec.SessionAffinity.Header).To(HaveValue(Equal("x-session-id")))
		Expect(got.Spec.SessionAffinity.TTL).To(HaveValue(Equal(metav1.Duration{Duration: 30 * 60e9})))
		Expect(got.Spec.Retry.Attempts).To(HaveValue(BeEquivalentTo(2))) // the gateway's DefaultRetryAttempts, as when retry is absent
		Expect(got.Spec.OutlierDetection.ConsecutiveFailures).To(HaveValue(BeEquivalentTo(5)))
		Expect(got.Spec.OutlierDetection.BaseEjectionTime).To(HaveValue(Equal(metav1.Duration{Duration: 30e9})))
		Expect(got.Spec.OutlierDetection.MaxEjectionPercent).To(HaveValue(BeEquivalentTo(50)))
		Expect(got.Status.Conditions).To(ConsistOf(SatisfyAll(
			HaveField("Type", v1alpha1.RoutingPolicyConditionAccepted),
			HaveField("Status", metav1.ConditionUnknown),
			HaveField("Reason", v1alpha1.RoutingPolicyReasonPending),
		)))
	})

	It("round-trips, and the status subresource stores status", func() {
		rp := &v1alpha1.RoutingPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "roundtrip", Namespace: ns},
			Spec: v1alpha1.RoutingPolicySpec{
				Strategy:              v1alpha1.StrategySessionAffinity,
				AllowStrategyOverride: ptr.To(true),
				SessionAffinity:       &v1alpha1.SessionAffinityConfig{Header: ptr.To("x-user"), TTL: &metav1.Duration{Duration: 90e9}},
			},
		}
		Expect(k8sClient.Create(ctx, rp)).To(Succeed())

		rp.Status = v1alpha1.RoutingPolicyStatus{
			ObservedGeneration: rp.Generation,
			AttachedRoutes:     2,
			ReadyEndpoints:     3,
			Conditions: []metav1.Condition{{
				Type: v1alpha1.RoutingPolicyConditionAccepted, Status: metav1.ConditionTrue,
				Reason: v1alpha1.RoutingPolicyReasonAccepted, Message: "ok",
				ObservedGeneration: rp.Generation, LastTransitionTime: metav1.Now(),
			}},
		}
		Expect(k8sClient.Status().Update(ctx, rp)).To(Succeed())

		var got v1alpha1.RoutingPolicy
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "roundtrip"}, &got)).To(Succeed())
		Expect(got.Spec.Strategy).To(Equal(v1alpha1.StrategySessionAffinity))
		Expect(got.Spec.AllowStrategyOverride).To(HaveValue(BeTrue()))
		Expect(got.Spec.SessionAffinity.Header).To(HaveValue(Equal("x-user")))
		Expect(got.Spec.SessionAffinity.TTL.Duration).To(BeEquivalentTo(90e9))
		Expect(got.Status.AttachedRoutes).To(BeEquivalentTo(2))
		Expect(got.Status.ReadyEndpoints).To(BeEquivalentTo(3))
		Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		Expect(got.Status.Conditions).To(ConsistOf(HaveField("Status", metav1.ConditionTrue)))

		// A spec update through the main resource must not touch status.
		got.Spec.Strategy = v1alpha1.StrategyRandom
		got.Status.AttachedRoutes = 99
		Expect(k8sClient.Update(ctx, &got)).To(Succeed())
		var after v1alpha1.RoutingPolicy
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "roundtrip"}, &after)).To(Succeed())
		Expect(after.Spec.Strategy).To(Equal(v1alpha1.StrategyRandom))
		Expect(after.Status.AttachedRoutes).To(BeEquivalentTo(2))
		Expect(after.Generation).To(BeNumerically(">", got.Status.ObservedGeneration))
	})
})

var _ = Describe("ModelAdapter validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	valid := func() v1alpha1.ModelAdapterSpec {
		return v1alpha1.ModelAdapterSpec{
			BaseModel:   "llama-3-8b",
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vllm"}},
			ArtifactURL: "s3://adapters/sql-lora",
		}
	}
	with := func(mutate func(*v1alpha1.ModelAdapterSpec)) v1alpha1.ModelAdapterSpec {
		s := valid()
		mutate(&s)
		return s
	}

	DescribeTable("admission",
		func(spec v1alpha1.ModelAdapterSpec, wantErr string) {
			ma := &v1alpha1.ModelAdapter{
				ObjectMeta: metav1.ObjectMeta{Name: uniqueName("ma"), Namespace: ns},
				Spec:       spec,
			}
			expectAdmission(k8sClient.Create(ctx, ma), wantErr)
		},
		Entry("a complete spec is accepted", valid(), ""),
		Entry("a local path artifact is accepted", with(func(s *v1alpha1.ModelAdapterSpec) { s.ArtifactURL = "/models/sql" }), ""),
		Entry("an empty base model is rejected", with(func(s *v1alpha1.ModelAdapterSpec) { s.BaseModel = "" }),
			"spec.baseModel in body should be at least 1 chars long"),
		Entry("a missing pod selector is rejected", with(func(s *v1alpha1.ModelAdapterSpec) { s.PodSelector = nil }),
			"spec.podSelector: Required value"),
		Entry("an artifact URL without a known scheme is rejected",
			with(func(s *v1alpha1.ModelAdapterSpec) { s.ArtifactURL = "ftp://x/y" }),
			"spec.artifactURL must be an absolute path or a s3://, gs://, http(s)://, hf:// or file:// URL"),
		Entry("negative replicas are rejected", with(func(s *v1alpha1.ModelAdapterSpec) { s.Replicas = ptr.To[int32](-1) }),
			"spec.replicas in body should be greater than or equal to 0"),
		Entry("an unknown scheduler is rejected", with(func(s *v1alpha1.ModelAdapterSpec) { s.SchedulerName = "bin-pack" }),
			`spec.schedulerName: Unsupported value: "bin-pack"`),
		Entry("an empty credentials secret name is rejected",
			with(func(s *v1alpha1.ModelAdapterSpec) { s.CredentialsSecretRef = &v1alpha1.SecretReference{} }),
			"spec.credentialsSecretRef.name in body should be at least 1 chars long"),
	)

	It("defaults the scheduler, round-trips and stores status through the subresource", func() {
		ma := &v1alpha1.ModelAdapter{
			ObjectMeta: metav1.ObjectMeta{Name: "sql-lora", Namespace: ns},
			Spec:       with(func(s *v1alpha1.ModelAdapterSpec) { s.Replicas = ptr.To[int32](2) }),
		}
		Expect(k8sClient.Create(ctx, ma)).To(Succeed())
		Expect(ma.Spec.SchedulerName).To(Equal(v1alpha1.SchedulerLeastAdapters))
		Expect(ma.Status.Conditions).To(ConsistOf(SatisfyAll(
			HaveField("Type", v1alpha1.ModelAdapterConditionReady),
			HaveField("Status", metav1.ConditionUnknown),
			HaveField("Reason", v1alpha1.ModelAdapterReasonPending),
		)))

		ma.Status = v1alpha1.ModelAdapterStatus{
			ObservedGeneration: ma.Generation,
			Instances:          []string{"engine-0", "engine-1"},
			DesiredReplicas:    2,
			ReadyReplicas:      2,
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ModelAdapterConditionReady, Status: metav1.ConditionTrue,
				Reason: v1alpha1.ModelAdapterReasonLoaded, Message: "loaded on 2 of 2 pods",
				ObservedGeneration: ma.Generation, LastTransitionTime: metav1.Now(),
			}},
		}
		Expect(k8sClient.Status().Update(ctx, ma)).To(Succeed())

		var got v1alpha1.ModelAdapter
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sql-lora"}, &got)).To(Succeed())
		Expect(got.Spec).To(Equal(ma.Spec))
		Expect(got.Status.Instances).To(Equal([]string{"engine-0", "engine-1"}))
		Expect(got.Status.ReadyReplicas).To(BeEquivalentTo(2))
		Expect(got.Status.Conditions).To(ConsistOf(HaveField("Reason", v1alpha1.ModelAdapterReasonLoaded)))
	})
})

var _ = Describe("Gateway API attachment", func() {
	It("stores an HTTPRoute whose rule references a RoutingPolicy through an ExtensionRef filter", func() {
		ns := newNamespace()
		route := &gatewayv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: ns},
			Spec: gatewayv1.HTTPRouteSpec{
				CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "switchboard"}}},
				Rules: []gatewayv1.HTTPRouteRule{{
					Filters: []gatewayv1.HTTPRouteFilter{{
						Type: gatewayv1.HTTPRouteFilterExtensionRef,
						ExtensionRef: &gatewayv1.LocalObjectReference{
							Group: gatewayv1.Group(v1alpha1.GroupVersion.Group),
							Kind:  "RoutingPolicy",
							Name:  "prefix",
						},
					}},
					BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
						BackendObjectReference: gatewayv1.BackendObjectReference{Name: "llama", Port: ptr.To[gatewayv1.PortNumber](8000)},
					}}},
				}},
			},
		}
		Expect(k8sClient.Create(ctx, route)).To(Succeed())

		var got gatewayv1.HTTPRoute
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "llm"}, &got)).To(Succeed())
		Expect(got.Spec.Rules).To(HaveLen(1))
		Expect(got.Spec.Rules[0].Filters).To(ConsistOf(HaveField("ExtensionRef", HaveValue(SatisfyAll(
			HaveField("Group", gatewayv1.Group("inference.switchboard.dev")),
			HaveField("Kind", gatewayv1.Kind("RoutingPolicy")),
			HaveField("Name", gatewayv1.ObjectName("prefix")),
		)))))
	})
})

var _ = Describe("config/samples", func() {
	It("are accepted by the API server", func() {
		ns := newNamespace()
		files, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "inference_*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(files).NotTo(BeEmpty())
		for _, f := range files {
			data, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			obj := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal(data, &obj.Object)).To(Succeed(), f)
			obj.SetNamespace(ns)
			Expect(k8sClient.Create(ctx, obj)).To(Succeed(), f)
		}
	})
})
