package endpoint

// Summary is the part of a metrics snapshot that routing decisions read for every
// candidate: small, flat and free of pointers, so that the cache can keep it beside each
// endpoint's request counters and a decision over thousands of endpoints reads it in one
// sweep of memory.
type Summary struct {
	// ScrapedAt is Metrics.ScrapedAt in Unix nanoseconds; 0 means no snapshot.
	ScrapedAt int64
	// KVCacheUsage is Metrics.UsedKVCache; BlockSize and NumGPUBlocks are the
	// snapshot's fields of those names.
	KVCacheUsage            float64
	BlockSize, NumGPUBlocks int64
	// Running, Waiting and LocalInFlight are the snapshot's fields of those names.
	Running, Waiting float64
	LocalInFlight    int64
	// Speed is what the snapshot's Profile tells of the engine's speed.
	Speed Speed
	// Epoch is Profile.Epoch.
	Epoch uint64
}

// Speed is an engine's scheduler and rates as routing predicts with them: a Profile
// without its evidence.
type Speed struct {
	// Slots, PrefillPerToken, Service and DecodePerToken are the Profile's fields of
	// those names.
	Slots, PrefillPerToken, Service, DecodePerToken float64
	// Learnt is Profile.Learnt.
	Learnt bool
}

// Summary returns the summary of m.
func (m *Metrics) Summary() Summary {
	s := Summary{
		KVCacheUsage:  m.UsedKVCache(),
		BlockSize:     int64(m.BlockSize),
		NumGPUBlocks:  int64(m.NumGPUBlocks),
		Running:       m.Running,
		Waiting:       m.Waiting,
		LocalInFlight: m.LocalInFlight,
		Speed:         m.Profile.Speed(),
		Epoch:         m.Profile.Epoch,
	}
	if !m.ScrapedAt.IsZero() {
		s.ScrapedAt = m.ScrapedAt.UnixNano()
	}
	return s
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
	return Speed{Slots: p.Slots, PrefillPerToken: p.PrefillPerToken, Service: p.Service,
		DecodePerToken: p.DecodePerToken, Learnt: p.Learnt()}
}

// Known reports whether s summarises a snapshot taken at or after oldest (Unix
// nanoseconds): whether a decision at that staleness bound may use it.
func (s *Summary) Known(oldest int64) bool { return s.ScrapedAt != 0 && s.ScrapedAt >= oldest }
