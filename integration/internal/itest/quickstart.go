//go:build unix

package itest

import (
	"sort"
)

// DemoTools are the demo server's tools, and DemoReadOnly those
// of them with readOnlyHint true.
var (
	DemoTools    = []string{"add_tool", "delete_note", "echo", "list_notes", "read_note", "slow_count", "write_note"}
	DemoReadOnly = []string{"echo", "list_notes", "read_note", "slow_count"}
)

// Prefixed returns prefix+"__"+name for every prefix and name, sorted.
func Prefixed(prefixes []string, names []string) []string {
	var out []string
	for _, p := range prefixes {
		for _, n := range names {
			out = append(out, p+"__"+n)
		}
	}
	sort.Strings(out)
	return out
}
