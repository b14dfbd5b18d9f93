package pins

import (
	"fmt"
	"strings"
)

// maxDiffLines bounds each side of a diff computed line by line; larger
// definitions are shown as removed whole and added whole.
const maxDiffLines = 2000

// Diff returns a readable line diff from the definition old to new (both
// canonical; old nil for a new tool): the indented JSON of each, lines
// only in old prefixed "- ", only in new "+ ", and common lines "  ",
// with runs of more than three unchanged lines elided.
func Diff(old, new []byte) string {
	a, b := pretty(old), pretty(new)
	var ops []string
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		for _, l := range a {
			ops = append(ops, "- "+l)
		}
		for _, l := range b {
			ops = append(ops, "+ "+l)
		}
	} else {
		ops = lineDiff(a, b)
	}
	return elide(ops, 3)
}

// lineDiff is a longest-common-subsequence diff of a and b.
func lineDiff(a, b []string) []string {
	n, m := len(a), len(b)
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			out = append(out, "  "+a[i])
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, "- "+a[i])
			i++
		default:
			out = append(out, "+ "+b[j])
			j++
		}
	}
	for ; i < n; i++ {
		out = append(out, "- "+a[i])
	}
	for ; j < m; j++ {
		out = append(out, "+ "+b[j])
	}
	return out
}

// elide keeps ctx unchanged lines around each change and replaces longer
// unchanged runs with one "  …" line.
func elide(lines []string, ctx int) string {
	keep := make([]bool, len(lines))
	for i, l := range lines {
		if strings.HasPrefix(l, "  ") {
			continue
		}
		for k := max(0, i-ctx); k <= min(len(lines)-1, i+ctx); k++ {
			keep[k] = true
		}
	}
	var b strings.Builder
	skipped := 0
	flush := func() {
		if skipped > 0 {
			fmt.Fprintf(&b, "  … (%d unchanged)\n", skipped)
			skipped = 0
		}
	}
	for i, l := range lines {
		if !keep[i] {
			skipped++
			continue
		}
		flush()
		b.WriteString(l)
		b.WriteByte('\n')
	}
	flush()
	return b.String()
}
