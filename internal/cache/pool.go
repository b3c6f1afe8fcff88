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

// poolFeed mirrors InferencePools into pools, into c as the ports of the ranks of the
// pods each selects (Cache.SetPool), and, as the Service that selects those ranks, into
// services under routetable.PoolService: a pool backend's candidates are then computed as
// a Service backend's are.
func poolFeed(c *Cache, pools *Store[routetable.Pool], services *Store[Service]) *feed[*inferencev1.InferencePool] {
	return &feed[*inferencev1.InferencePool]{
		kind:      "inferencepool",
		newObject: func() *inferencev1.InferencePool { return new(inferencev1.InferencePool) },
		newList:   func() client.ObjectList { return new(inferencev1.InferencePoolList) },
		apply: func(obj *inferencev1.InferencePool) error {
			pool := routetable.PoolOf(obj)
			c.SetPool(pool.Key, pool.Selector, pool.Ports)
			pools.set(pool.Key, pool)
			services.set(routetable.PoolService(pool.Key), poolService(pool))
			return nil
		},
		remove: func(key types.NamespacedName) {
			pools.remove(key)
			services.remove(routetable.PoolService(key))
			c.DeletePool(key)
		},
		batch: func(writes func()) { pools.batch(func() { services.batch(writes) }) },
	}
}

// poolService is the Service equivalent of pool: its selector, its targetPorts as the
// Service's ports and as its Ranks, so that it selects the endpoint of each selected pod
// on each of them.
func poolService(pool routetable.Pool) Service {
	svc := Service{Key: routetable.PoolService(pool.Key), Selector: pool.Selector, Ranks: pool.Ports}
	for _, port := range pool.Ports {
		svc.Ports = append(svc.Ports, ServicePort{Port: port, TargetPort: intstr.FromInt32(port)})
	}
	return svc
}

// KnowsKind reports whether mgr's API server serves the kind gk, such as a kind whose
// CRD is optional; a failed lookup counts as not served.
func KnowsKind(mgr ctrl.Manager, gk schema.GroupKind) bool {
	_, err := mgr.GetRESTMapper().RESTMapping(gk)
	return err == nil
}
