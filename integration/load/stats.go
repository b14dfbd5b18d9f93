package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// pcts are the percentiles of one series of single-call latencies.
type pcts struct {
	p50, p90, p99 time.Duration
	n             int
}

// percentiles uses the nearest-rank method on a sorted copy of d.
func percentiles(d []time.Duration) pcts {
	if len(d) == 0 {
		return pcts{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return pcts{p50: rank(0.50), p90: rank(0.90), p99: rank(0.99), n: len(s)}
}

// median of per-run figures; for an even count, the mean of the middle two.
func median[T ~int64 | ~float64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// us formats a duration in microseconds with one decimal.
func us(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond))
}

// signed is us with an explicit sign.
func signed(d time.Duration) string {
	if d < 0 {
		return us(d)
	}
	return "+" + us(d)
}
