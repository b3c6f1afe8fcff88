// Package controller groups Switchboard's reconcilers, one sub-package each:
// modeladapter (LoRA placement and lifecycle), policystatus (RoutingPolicy status) and
// gatewaystatus (GatewayClass, Gateway and HTTPRoute status). This file holds the RBAC
// rules the manager needs beyond its reconcilers' own: reading what its cache context
// watches, and its leader-election lease.
package controller

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.switchboard.dev,resources=modeladapters,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
