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

// writePlots draws TTFT against request rate per strategy for every workload (mean and
// p99) and the prefix-cache hit rate per strategy and workload.
func writePlots(res *Results, dir string) (plotSet, error) {
	out := plotSet{}
	for _, w := range res.Workloads {
		for _, stat := range []string{"mean", "p99"} {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("%s: %s TTFT vs request rate", w.Title, stat)
			p.X.Label.Text = "request rate (req/s, Poisson)"
			p.Y.Label.Text = stat + " TTFT (ms, log scale)"
			// Log scale: an overloaded strategy is seconds above the others' milliseconds.
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
			p.Legend.Top, p.Legend.Left = true, true
			var lines []any
			for _, s := range res.Strategies {
				var xys plotter.XYs
				for _, pt := range res.Points {
					if pt.Workload == w.Name && pt.Strategy == s && pt.TTFT.Count > 0 {
						y := pt.TTFT.Mean
						if stat == "p99" {
							y = pt.TTFT.P99
						}
						xys = append(xys, plotter.XY{X: pt.Rate, Y: y})
					}
				}
				if len(xys) > 0 {
					lines = append(lines, s, xys)
				}
			}
			if len(lines) == 0 {
				continue
			}
			if err := plotutil.AddLinePoints(p, lines...); err != nil {
				return nil, fmt.Errorf("plot %s: %w", w.Name, err)
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
	p.Title.Text = "Engine prefix-cache hit rate per strategy (all rates)"
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

// hitRate is the prefix-cache hit rate of a strategy on a workload over all its rates.
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
