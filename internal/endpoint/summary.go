package endpoint

// Queue is what a metrics snapshot tells of an engine's queue and scheduler: the part a
// routing decision reads for every candidate to predict how long a request would wait.
// It is small and flat so that the cache can keep it beside each endpoint's request
// counters and a decision can hold it in registers.
type Queue struct {
	// Running, Waiting and LocalInFlight are the Metrics fields of those names.
	Running, Waiting float64
	LocalInFlight    int64
	// Slots is Profile.Slots.
	Slots float64
}

// Speed is an engine's rates as routing predicts with them: a Profile's rates without
// their evidence.
type Speed struct {
	// PrefillPerToken, Service and DecodePerToken are the Profile's fields of those
	// names.
	PrefillPerToken, Service, DecodePerToken float64
	// Learnt is Profile.Learnt.
	Learnt bool
}

// Queue returns m's queue.
func (m *Metrics) Queue() Queue {
	return Queue{Running: m.Running, Waiting: m.Waiting, LocalInFlight: m.LocalInFlight, Slots: m.Profile.Slots}
}

// UsedKVCache returns KVCacheUsage, or 0 when the engine reported a negative or NaN
// usage, which says nothing of it.
func (m *Metrics) UsedKVCache() float64 {
	if m.KVCacheUsage >= 0 {
		return m.KVCacheUsage
	}
	return 0
}

// Speed returns p's speed.
func (p *Profile) Speed() Speed {
	return Speed{PrefillPerToken: p.PrefillPerToken, Service: p.Service, DecodePerToken: p.DecodePerToken,
		Learnt: p.Learnt()}
}
