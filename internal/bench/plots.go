package bench

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot is one generated figure.
type Plot struct {
	File  string // file name inside the output directory
	Title string
}

// plotSet names the figures of a report; the markdown refers to them by key.
type plotSet map[string]Plot

func ttftKey(workload, stat string) string { return "ttft-" + stat + "-" + workload }

const hitRateKey = "hit-rate"

// writePlots draws the median TTFT over the seeds against request rate per strategy for
// every workload (mean and p99, with min–max bars when there are several seeds) and the
// prefix-cache hit rate per strategy and workload.
func writePlots(res *Results, dir string) (plotSet, error) {
	out := plotSet{}
	aggs := Aggregates(res)
	for _, w := range res.Workloads {
		for _, stat := range []string{"mean", "p99"} {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("%s: %s TTFT vs request rate", w.Title, stat)
			p.X.Label.Text = "request rate (req/s, Poisson)"
			p.Y.Label.Text = "median " + stat + " TTFT over seeds (ms, log scale)"
			// Log scale: an overloaded strategy is seconds above the others' milliseconds.
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
			p.Legend.Top, p.Legend.Left = true, true
			var lines []any
			var bars []rangePoints
			for _, s := range res.Strategies {
				var pts rangePoints
				for _, a := range aggs {
					v := a.TTFTMean
					if stat == "p99" {
						v = a.TTFTP99
					}
					if a.Workload == w.Name && a.Strategy == s && v.N > 0 && v.Min > 0 {
						pts.XYs = append(pts.XYs, plotter.XY{X: a.Rate, Y: v.Median})
						pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{v.Median - v.Min, v.Max - v.Median})
					}
				}
				if len(pts.XYs) > 0 {
					lines, bars = append(lines, s, pts.XYs), append(bars, pts)
				}
			}
			if len(lines) == 0 {
				continue
			}
			if err := plotutil.AddLinePoints(p, lines...); err != nil {
				return nil, fmt.Errorf("plot %s: %w", w.Name, err)
			}
			for i, pts := range bars {
				if !pts.spread() {
					continue // one seed, or equal values: no bar
				}
				eb, err := plotter.NewYErrorBars(pts)
				if err != nil {
					return nil, fmt.Errorf("plot %s: %w", w.Name, err)
				}
				eb.LineStyle.Color = plotutil.Color(i) // the colour AddLinePoints gave the line
				p.Add(eb)
			}
			key := ttftKey(w.Name, stat)
			file := key + ".png"
			if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, file)); err != nil {
				return nil, fmt.Errorf("save %s: %w", file, err)
			}
			out[key] = Plot{File: file, Title: p.Title.Text}
		}
	}

	p := plot.New()
	p.Title.Text = "Engine prefix-cache hit rate per strategy (all rates and seeds)"
	p.Y.Label.Text = "hit rate (%)"
	p.Y.Min, p.Y.Max = 0, 118 // headroom for the legend
	p.Legend.Top = true
	width := vg.Points(14)
	for i, w := range res.Workloads {
		vals := make(plotter.Values, len(res.Strategies))
		for j, s := range res.Strategies {
			vals[j] = 100 * hitRate(res.Points, w.Name, s)
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, fmt.Errorf("hit-rate bars: %w", err)
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(i)
		bars.Offset = width * vg.Length(float64(i)-float64(len(res.Workloads)-1)/2)
		p.Add(bars)
		p.Legend.Add(w.Title, bars)
	}
	if len(res.Workloads) > 0 && len(res.Strategies) > 0 {
		p.NominalX(res.Strategies...)
		file := hitRateKey + ".png"
		if err := p.Save(8*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, file)); err != nil {
			return nil, fmt.Errorf("save %s: %w", file, err)
		}
		out[hitRateKey] = Plot{File: file, Title: p.Title.Text}
	}
	return out, nil
}

// rangePoints are medians with their distances to the minimum and maximum.
type rangePoints struct {
	plotter.XYs
	plotter.YErrors
}

// spread reports whether any point has a range.
func (r rangePoints) spread() bool {
	for _, e := range r.YErrors {
		if e.Low > 0 || e.High > 0 {
			return true
		}
	}
	return false
}

// hitRate is the prefix-cache hit rate of a strategy on a workload over all its rates and seeds.
func hitRate(points []PointResult, workload, strategy string) float64 {
	var hits, queries float64
	for _, pt := range points {
		if pt.Workload == workload && pt.Strategy == strategy {
			hits += pt.PrefixHits
			queries += pt.PrefixQueries
		}
	}
	if queries == 0 {
		return 0
	}
	return hits / queries
}
