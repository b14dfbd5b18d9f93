package lograte

import (
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	e := Every{Interval: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{2 * time.Second, false, 0},
		{10 * time.Second, true, 2},
		{11 * time.Second, false, 0},
		{30 * time.Second, true, 1},
	}
	for i, s := range steps {
		ok, n := e.AllowAt(t0.Add(s.at))
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d at %s: AllowAt = %v, %d; want %v, %d", i, s.at, ok, n, s.ok, s.suppressed)
		}
	}
}
