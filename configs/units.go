package configs

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// duration reads a duration such as "30s". A bare number is rejected: it has
// no unit, and decoding it as nanoseconds would silently misconfigure.
func (v *validator) duration(p keyPath, raw any, def time.Duration) time.Duration {
	if raw == nil {
		return def
	}
	s, ok := raw.(string)
	if !ok {
		v.errorf(p, "invalid duration %v: want a string with a unit, e.g. \"30s\"", raw)
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		v.errorf(p, "invalid duration %q (want e.g. \"30s\")", s)
		return def
	}
	if d <= 0 {
		v.errorf(p, "duration %q must be positive", s)
		return def
	}
	return d
}

// size reads a byte size: an integer, or a string such as "4MiB" or "512KB".
func (v *validator) size(p keyPath, raw any, def int64) int64 {
	var (
		n   int64
		err error
	)
	switch raw := raw.(type) {
	case nil:
		return def
	case int64:
		n = raw
	case string:
		n, err = parseSize(raw)
	default:
		err = fmt.Errorf("invalid size %v", raw)
	}
	if err != nil {
		v.errorf(p, "%v (want bytes, or e.g. \"4MiB\", \"512KB\")", err)
		return def
	}
	if n <= 0 {
		v.errorf(p, "size must be positive, got %d", n)
		return def
	}
	return n
}

// sizeUnits are the suffixes parseSize accepts; KiB, MiB, GiB are powers of
// 1024 and KB, MB, GB powers of 1000.
var sizeUnits = map[string]int64{
	"": 1, "B": 1,
	"KB": 1e3, "MB": 1e6, "GB": 1e9,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
}

func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	mult, ok := sizeUnits[strings.TrimSpace(t[i:])]
	if i == 0 || !ok {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}
