package bench

import (
	"math"
	"slices"
	"time"
)

// Figure summarizes one measured phase: how many operations, how long the
// phase took from its first start to its last end, the rate, and latency
// percentiles of single operations in microseconds.
type Figure struct {
	Ops       int     `json:"ops"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	MeanUs    float64 `json:"mean_us"`
}

// Latencies collects the durations of one worker's operations. It is not
// safe for concurrent use: give each worker its own and Merge them.
type Latencies []time.Duration

// Time runs fn and records how long it took.
func (l *Latencies) Time(fn func() error) error {
	start := time.Now()
	err := fn()
	*l = append(*l, time.Since(start))
	return err
}

// Merge concatenates the latencies of several workers.
func Merge(parts []Latencies) Latencies {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make(Latencies, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Summarize turns latencies and the wall time of their phase into a Figure.
func Summarize(lat Latencies, wall time.Duration) Figure {
	f := Figure{Ops: len(lat), Seconds: wall.Seconds()}
	if len(lat) == 0 {
		return f
	}
	if wall > 0 {
		f.OpsPerSec = float64(len(lat)) / wall.Seconds()
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	f.P50us = micros(percentile(s, 0.50))
	f.P99us = micros(percentile(s, 0.99))
	f.MeanUs = micros(sum / time.Duration(len(s)))
	return f
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 {
	return math.Round(float64(d.Nanoseconds())/100) / 10 // 0.1 µs resolution
}

// Ratio is a/b, or 0 when b is 0 (a figure that was not measured).
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// MedianFigure combines the figures of several rounds of one measurement:
// the operations and seconds add up, and every rate and latency is the
// median of the rounds' (the mean of the middle two for an even count).
func MedianFigure(rounds []Figure) Figure {
	var f Figure
	if len(rounds) == 0 {
		return f
	}
	pick := func(get func(Figure) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = get(r)
		}
		return Median(v)
	}
	for _, r := range rounds {
		f.Ops += r.Ops
		f.Seconds += r.Seconds
	}
	f.OpsPerSec = pick(func(r Figure) float64 { return r.OpsPerSec })
	f.P50us = pick(func(r Figure) float64 { return r.P50us })
	f.P99us = pick(func(r Figure) float64 { return r.P99us })
	f.MeanUs = pick(func(r Figure) float64 { return r.MeanUs })
	return f
}

// Median of values (the mean of the middle two for an even count; 0 for
// none).
func Median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
