package demo

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/configs"
)

// TestQuickstartComments checks what the embedded quickstart's comments say
// about the demo server against the tools it lists: the notes upstream's
// comment names every tool, and the readonly profile's comment names every
// read-only tool and counts them right (it once said 3 where there were 4).
func TestQuickstartComments(t *testing.T) {
	p := startPipe(t, "tools", protocolModes[0].modern, protocolModes[0].opts...)
	tools := listTools(t, p)
	var all, readOnly []string
	for name, tool := range tools {
		all = append(all, name)
		if ro := tool.Annotations.ReadOnlyHint; ro != nil && *ro {
			readOnly = append(readOnly, name)
		}
	}
	slices.Sort(readOnly)

	text := string(configs.Quickstart())
	notes := comment(t, text, "[upstreams.notes]")
	for _, name := range all {
		if !strings.Contains(notes, name) {
			t.Errorf("the [upstreams.notes] comment does not name the demo tool %s:\n%s", name, notes)
		}
	}
	ro := comment(t, text, "[profiles.readonly]")
	for _, name := range readOnly {
		if !strings.Contains(ro, name) {
			t.Errorf("the [profiles.readonly] comment does not name the read-only tool %s:\n%s", name, ro)
		}
	}
	if want := fmt.Sprintf("%d from each demo server", len(readOnly)); !strings.Contains(ro, want) {
		t.Errorf("the [profiles.readonly] comment does not say %q (read-only tools: %v):\n%s", want, readOnly, ro)
	}
}

// comment returns the comment lines right after the table header in text.
func comment(t *testing.T, text, header string) string {
	t.Helper()
	_, after, ok := strings.Cut(text, "\n"+header+"\n")
	if !ok {
		t.Fatalf("quickstart has no %s table", header)
	}
	var lines []string
	for _, l := range strings.Split(after, "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		lines = append(lines, l)
	}
	return regexp.MustCompile(`\s+`).ReplaceAllString(strings.Join(lines, " "), " ")
}
