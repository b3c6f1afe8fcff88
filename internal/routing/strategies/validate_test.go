package strategies

import (
	"errors"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
)

// TestValidate covers the reasons Validate gives, including the UnknownStrategy cases the
// CRD's enum rejects at admission (reachable only with an older CRD or a newer client).
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   v1alpha1.RoutingPolicySpec
		reason string // "" for valid
	}{
		{name: "valid", spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}},
		{name: "prefix-cache with ratio", spec: v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{MinMatchRatio: ptr.To("0.5")},
		}},
		{name: "unknown strategy", spec: v1alpha1.RoutingPolicySpec{Strategy: "fastest"},
			reason: v1alpha1.RoutingPolicyReasonUnknownStrategy},
		{name: "unknown fallback", spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyRandom, Fallback: ptr.To(v1alpha1.Strategy("x"))},
			reason: v1alpha1.RoutingPolicyReasonUnknownStrategy},
		{name: "unknown scorer", spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyWeighted, Scorers: []v1alpha1.Scorer{{Name: "x"}}},
			reason: v1alpha1.RoutingPolicyReasonUnknownStrategy},
		{name: "unparseable min match ratio", spec: v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyPrefixCache, PrefixCache: &v1alpha1.PrefixCacheConfig{MinMatchRatio: ptr.To("half")},
		}, reason: v1alpha1.RoutingPolicyReasonInvalidParameters},
		{name: "scorers of weight zero", spec: v1alpha1.RoutingPolicySpec{
			Strategy: v1alpha1.StrategyWeighted, Scorers: []v1alpha1.Scorer{{Name: v1alpha1.StrategyRandom, Weight: ptr.To[int32](0)}},
		}, reason: v1alpha1.RoutingPolicyReasonInvalidParameters},
		{name: "weighted without scorers", spec: v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyWeighted},
			reason: v1alpha1.RoutingPolicyReasonInvalidParameters},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(&tc.spec)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var invalid *InvalidSpecError
			if !errors.As(err, &invalid) {
				t.Fatalf("Validate: %v, want an *InvalidSpecError", err)
			}
			if invalid.Reason != tc.reason || invalid.Message == "" {
				t.Fatalf("Validate: reason %q message %q, want reason %q", invalid.Reason, invalid.Message, tc.reason)
			}
		})
	}
}
