// Package scheme builds the runtime.Scheme every Switchboard process and test uses:
// Kubernetes core types, Switchboard's API, the Gateway API and the Gateway API Inference
// Extension's InferencePool. It owns nothing else.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
)

// New returns a fresh scheme with core Kubernetes, inference.switchboard.dev/v1alpha1
// gateway.networking.k8s.io/v1 and inference.networking.k8s.io/v1 types.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, gatewayv1.Install, inferencev1.Install} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
