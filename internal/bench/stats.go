package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// PoissonSchedule returns the send offsets of an open-loop Poisson arrival process of rate
// requests per second over duration: exponential inter-arrival gaps drawn from a generator
// seeded with seed, so equal arguments give equal schedules. It returns nil when rate or
// duration is not positive.
func PoissonSchedule(rate float64, duration time.Duration, seed uint64) []time.Duration {
	if rate <= 0 || duration <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0xa881fa1))
	var offsets []time.Duration
	t := 0.0
	for {
		t += rng.ExpFloat64() / rate
		d := time.Duration(t * float64(time.Second))
		if d >= duration {
			return offsets
		}
		offsets = append(offsets, d)
	}
}

// Summary describes a sample of durations in milliseconds.
type Summary struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// milliseconds returns d in milliseconds, the unit of the reports.
func milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Summarize returns the mean, percentiles and maximum of samples in milliseconds; a zero
// Summary for no samples. samples is not modified.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	ms := make([]float64, len(samples))
	sum := 0.0
	for i, d := range samples {
		ms[i] = milliseconds(d)
		sum += ms[i]
	}
	slices.Sort(ms)
	return Summary{
		Count: len(ms),
		Mean:  sum / float64(len(ms)),
		P50:   Percentile(ms, 0.50),
		P90:   Percentile(ms, 0.90),
		P99:   Percentile(ms, 0.99),
		Max:   ms[len(ms)-1],
	}
}

// Percentile returns the q-quantile (0 <= q <= 1) of sorted by linear interpolation
// between the closest ranks; NaN for an empty slice.
func Percentile(sorted []float64, q float64) float64 {
	switch n := len(sorted); {
	case n == 0:
		return math.NaN()
	case n == 1 || q <= 0:
		return sorted[0]
	case q >= 1:
		return sorted[n-1]
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	frac := pos - float64(lo)
	if lo+1 >= len(sorted) {
		return sorted[lo]
	}
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// Spread describes how evenly requests were spread across engines.
type Spread struct {
	// PerEngine is the number of requests each engine completed, in engine order.
	PerEngine []float64 `json:"per_engine"`
	// CV is the coefficient of variation (standard deviation / mean); 0 is perfectly even.
	CV float64 `json:"cv"`
	// MaxOverMean is the busiest engine's share relative to a perfectly even share.
	MaxOverMean float64 `json:"max_over_mean"`
}

// NewSpread summarises per-engine request counts.
func NewSpread(perEngine []float64) Spread {
	s := Spread{PerEngine: perEngine}
	if len(perEngine) == 0 {
		return s
	}
	sum, hi := 0.0, 0.0
	for _, v := range perEngine {
		sum += v
		hi = max(hi, v)
	}
	mean := sum / float64(len(perEngine))
	if mean == 0 {
		return s
	}
	variance := 0.0
	for _, v := range perEngine {
		variance += (v - mean) * (v - mean)
	}
	variance /= float64(len(perEngine))
	s.CV = math.Sqrt(variance) / mean
	s.MaxOverMean = hi / mean
	return s
}
