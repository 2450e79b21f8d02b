package bench

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Series is one line of a chart.
type Series struct {
	Name string
	X, Y []float64
}

// palette holds distinguishable line colours, in series order.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// writeLineChart draws the series as lines with points and saves a PNG at path.
func writeLineChart(path, title, xLabel, yLabel string, series []Series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	for i, s := range series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("bench: chart %q: series %q has %d x and %d y values", title, s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			xys[j] = plotter.XY{X: s.X[j], Y: s.Y[j]}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("bench: chart %q: %w", title, err)
		}
		c := palette[i%len(palette)]
		line.Color = c
		line.Width = vg.Points(1.5)
		points.Color = c
		points.Radius = vg.Points(2)
		p.Add(line, points)
		p.Legend.Add(s.Name, line)
	}
	// Room above the data for the legend, and plain tick labels.
	p.Y.Min = min(p.Y.Min, 0)
	p.Y.Max *= 1.4
	p.X.Tick.Marker = plainTicks{}
	p.Y.Tick.Marker = plainTicks{}
	if err := p.Save(6*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("bench: chart %q: %w", title, err)
	}
	return nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros.
type plainTicks struct{}

// Ticks returns the default ticks between lo and hi with short labels.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 6, 64)
		}
	}
	return ticks
}

// BarGroup is one bar series of a grouped bar chart: a value per category.
type BarGroup struct {
	Name   string
	Values []float64
}

// writeBarChart draws groups side by side in each category, with a dashed
// reference line at ref, and saves a PNG at path.
func writeBarChart(path, title, yLabel string, categories []string, groups []BarGroup, ref float64, refName string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	w := vg.Points(16)
	for i, g := range groups {
		if len(g.Values) != len(categories) {
			return fmt.Errorf("bench: chart %q: group %q has %d values for %d categories", title, g.Name, len(g.Values), len(categories))
		}
		bars, err := plotter.NewBarChart(plotter.Values(g.Values), w)
		if err != nil {
			return fmt.Errorf("bench: chart %q: %w", title, err)
		}
		bars.Color = palette[i%len(palette)]
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(2*i-len(groups)+1) / 2
		p.Add(bars)
		p.Legend.Add(g.Name, bars)
	}
	line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ref}, {X: float64(len(categories)) - 0.5, Y: ref}})
	if err != nil {
		return fmt.Errorf("bench: chart %q: %w", title, err)
	}
	line.Color = color.Gray{Y: 0x40}
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(line)
	p.Legend.Add(refName, line)
	p.NominalX(categories...)
	p.X.Min, p.X.Max = -0.5, float64(len(categories))-0.5
	p.Y.Min = 0
	p.Y.Max *= 1.45 // room above the bars for the legend
	p.Y.Tick.Marker = stepTicks{}
	// Room for a label and len(groups) bars per category.
	width := max(6*vg.Inch, vg.Length(len(categories))*(w*vg.Length(len(groups))+vg.Points(36)))
	if err := p.Save(width, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("bench: chart %q: %w", title, err)
	}
	return nil
}

// stepTicks labels every multiple of a round step (0.1, 0.2, 0.25 or 0.5
// times a power of ten) that gives at most ten ticks between lo and hi.
type stepTicks struct{}

// Ticks returns the labelled ticks between lo and hi.
func (stepTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	step := math.Pow(10, math.Floor(math.Log10(hi-lo)))
	for _, f := range []float64{0.1, 0.2, 0.25, 0.5, 1} {
		if (hi-lo)/(step*f) <= 10 {
			step *= f
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi; i++ {
		v := i * step
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 6, 64)})
	}
	return ticks
}
