// Package v1alpha1 contains the inference.switchboard.dev/v1alpha1 API: RoutingPolicy, which says
// how the gateway picks an endpoint for the HTTPRoute rules that reference it, and ModelAdapter,
// which loads a LoRA adapter onto engine pods and makes it routable.
//
// +kubebuilder:object:generate=true
// +groupName=inference.switchboard.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "inference.switchboard.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
