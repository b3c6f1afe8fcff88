package cache

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// poolFeed mirrors InferencePools into pools and, as the Service that selects the
// pool's pods on its port, into services under routetable.PoolService: a pool backend's
// candidates are then computed as a Service backend's are.
func poolFeed(pools *Store[routetable.Pool], services *Store[Service]) *feed[*inferencev1.InferencePool] {
	return &feed[*inferencev1.InferencePool]{
		kind:      "inferencepool",
		newObject: func() *inferencev1.InferencePool { return new(inferencev1.InferencePool) },
		newList:   func() client.ObjectList { return new(inferencev1.InferencePoolList) },
		apply: func(obj *inferencev1.InferencePool) error {
			pool := routetable.PoolOf(obj)
			pools.set(pool.Key, pool)
			services.set(routetable.PoolService(pool.Key), poolService(pool))
			return nil
		},
		remove: func(key types.NamespacedName) {
			pools.remove(key)
			services.remove(routetable.PoolService(key))
		},
		batch: func(writes func()) { pools.batch(func() { services.batch(writes) }) },
	}
}

// poolService is the Service equivalent of pool: its selector, and its pods' port as
// both the Service port and the target port.
func poolService(pool routetable.Pool) Service {
	svc := Service{Key: routetable.PoolService(pool.Key), Selector: pool.Selector}
	if pool.Port > 0 {
		svc.Ports = []ServicePort{{Port: pool.Port, TargetPort: intstr.FromInt32(pool.Port)}}
	}
	return svc
}

// KnowsKind reports whether mgr's API server serves the kind gk, such as a kind whose
// CRD is optional; a failed lookup counts as not served.
func KnowsKind(mgr ctrl.Manager, gk schema.GroupKind) bool {
	_, err := mgr.GetRESTMapper().RESTMapping(gk)
	return err == nil
}
