package bench

import (
	"cmp"
	"math"
	"slices"
)

// Stat is one measure of a load point over its seeds: the median and the range of the
// per-seed values.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// N is the number of seeds with a value; latencies leave out a seed of which no request
	// completed. With N zero the other fields are zero and mean nothing.
	N int `json:"n"`
}

// NewStat returns the median, minimum and maximum of values; the median of an even number
// of values is the mean of the middle two. values is not modified.
func NewStat(values []float64) Stat {
	if len(values) == 0 {
		return Stat{}
	}
	sorted := slices.Sorted(slices.Values(values))
	return Stat{Median: Percentile(sorted, 0.5), Min: sorted[0], Max: sorted[len(sorted)-1], N: len(sorted)}
}

// Aggregate is one workload × strategy × rate point over all its seeds. It is derived from
// the per-seed points, never measured on its own.
type Aggregate struct {
	Workload string  `json:"workload"`
	Strategy string  `json:"strategy"`
	Rate     float64 `json:"rate_rps"`
	// Seeds are the seeds of the per-seed points, in run order.
	Seeds []uint64 `json:"seeds"`
	// Sent, Completed and Failed are totals over the seeds.
	Sent      int `json:"sent"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`

	TTFTMean        Stat `json:"ttft_mean_ms"`
	TTFTP50         Stat `json:"ttft_p50_ms"`
	TTFTP90         Stat `json:"ttft_p90_ms"`
	TTFTP99         Stat `json:"ttft_p99_ms"`
	E2EMean         Stat `json:"e2e_mean_ms"`
	E2EP99          Stat `json:"e2e_p99_ms"`
	Throughput      Stat `json:"throughput_rps"`
	TokenThroughput Stat `json:"output_tokens_per_s"`
	HitRate         Stat `json:"prefix_cache_hit_rate"`
	SpreadCV        Stat `json:"load_spread_cv"`
	MaxOverMean     Stat `json:"load_spread_max_over_mean"`
	FailedShare     Stat `json:"failed_share"`
}

type pointKey struct {
	workload, strategy string
	rate               float64
}

// Aggregates groups res.Points by workload, strategy and rate and summarises each group
// over its seeds. Groups come in the order of res.Workloads, res.Strategies and
// res.Settings.Rates; points of a workload, strategy or rate not listed there follow in the
// order they were measured.
func Aggregates(res *Results) []Aggregate {
	groups := map[pointKey][]PointResult{}
	var keys []pointKey
	for _, p := range res.Points {
		k := pointKey{p.Workload, p.Strategy, p.Rate}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], p)
	}
	rank := func(i int) int {
		if i < 0 {
			return math.MaxInt
		}
		return i
	}
	workloadRank := func(name string) int {
		return rank(slices.IndexFunc(res.Workloads, func(w WorkloadInfo) bool { return w.Name == name }))
	}
	slices.SortStableFunc(keys, func(a, b pointKey) int {
		return cmp.Or(
			cmp.Compare(workloadRank(a.workload), workloadRank(b.workload)),
			cmp.Compare(rank(slices.Index(res.Strategies, a.strategy)), rank(slices.Index(res.Strategies, b.strategy))),
			cmp.Compare(rank(slices.Index(res.Settings.Rates, a.rate)), rank(slices.Index(res.Settings.Rates, b.rate))),
		)
	})
	out := make([]Aggregate, 0, len(keys))
	for _, k := range keys {
		out = append(out, aggregate(groups[k]))
	}
	return out
}

// aggregate summarises the per-seed points of one workload, strategy and rate.
func aggregate(points []PointResult) Aggregate {
	a := Aggregate{Workload: points[0].Workload, Strategy: points[0].Strategy, Rate: points[0].Rate}
	// of returns the values of f over all points; latencies skips the points where no
	// request completed, whose zero summaries would read as instant answers.
	of := func(f func(PointResult) float64) Stat {
		var vs []float64
		for _, p := range points {
			vs = append(vs, f(p))
		}
		return NewStat(vs)
	}
	latencies := func(f func(PointResult) float64) Stat {
		var vs []float64
		for _, p := range points {
			if p.Completed > 0 {
				vs = append(vs, f(p))
			}
		}
		return NewStat(vs)
	}
	for _, p := range points {
		a.Seeds = append(a.Seeds, p.Seed)
		a.Sent += p.Sent
		a.Completed += p.Completed
		a.Failed += p.Failed
	}
	a.TTFTMean = latencies(func(p PointResult) float64 { return p.TTFT.Mean })
	a.TTFTP50 = latencies(func(p PointResult) float64 { return p.TTFT.P50 })
	a.TTFTP90 = latencies(func(p PointResult) float64 { return p.TTFT.P90 })
	a.TTFTP99 = latencies(func(p PointResult) float64 { return p.TTFT.P99 })
	a.E2EMean = latencies(func(p PointResult) float64 { return p.E2E.Mean })
	a.E2EP99 = latencies(func(p PointResult) float64 { return p.E2E.P99 })
	a.Throughput = of(func(p PointResult) float64 { return p.Throughput })
	a.TokenThroughput = of(func(p PointResult) float64 { return p.TokenThroughput })
	a.HitRate = of(func(p PointResult) float64 { return p.HitRate })
	a.SpreadCV = of(func(p PointResult) float64 { return p.Spread.CV })
	a.MaxOverMean = of(func(p PointResult) float64 { return p.Spread.MaxOverMean })
	a.FailedShare = of(PointResult.FailedShare)
	return a
}

// findAggregate returns the aggregate of workload, strategy and rate in aggs.
func findAggregate(aggs []Aggregate, workload, strategy string, rate float64) (Aggregate, bool) {
	for _, a := range aggs {
		if a.Workload == workload && a.Strategy == strategy && a.Rate == rate {
			return a, true
		}
	}
	return Aggregate{}, false
}

// MedianRatio is s's median over ref's median; false when either has no value or ref's
// median is not positive.
func MedianRatio(s, ref Stat) (float64, bool) {
	if s.N == 0 || ref.N == 0 || ref.Median <= 0 {
		return 0, false
	}
	return s.Median / ref.Median, true
}
