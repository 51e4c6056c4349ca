// Package plots draws the report's PNG line charts with gonum/plot.
package plots

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Line is one named series.
type Line struct {
	Name string
	X, Y []float64
}

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255}, color.RGBA{R: 127, G: 127, B: 127, A: 255},
}

// Lines writes a PNG of the series to path; logY uses a log scale (for
// latencies spanning decades).
func Lines(path, title, xLabel, yLabel string, logY bool, lines []Line) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Legend.Top = true
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	for i, l := range lines {
		pts := make(plotter.XYs, 0, len(l.X))
		for j := range l.X {
			y := l.Y[j]
			if logY && y <= 0 {
				continue // no point on a log axis
			}
			pts = append(pts, plotter.XY{X: l.X[j], Y: y})
		}
		if len(pts) == 0 {
			continue
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plots: %w", err)
		}
		ln.Color = palette[i%len(palette)]
		ln.Width = vg.Points(1.5)
		p.Add(ln)
		p.Legend.Add(l.Name, ln)
	}
	if err := p.Save(8*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("plots: save %s: %w", path, err)
	}
	return nil
}
