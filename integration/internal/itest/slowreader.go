//go:build linux

package itest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// ProcBytes reads one "Key: N kB" line of /proc/PID/status, in bytes.
func ProcBytes(t *testing.T, pid int, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return n << 10
				}
			}
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}
