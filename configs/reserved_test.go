package configs

import (
	"strings"
	"testing"
)

// TestReservedPrefix checks that no upstream can take the prefix of
// viewmux's own tools, whether it is set or comes from the name.
func TestReservedPrefix(t *testing.T) {
	tests := []struct {
		name, text string
		line       int
	}{
		{"explicit prefix", "[upstreams.tools]\ncommand = \"x\"\nprefix = \"viewmux\"\n", 3},
		{"prefix from the upstream name", "[upstreams.other]\ncommand = \"x\"\n\n[upstreams.viewmux]\ncommand = \"x\"\n", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.toml", []byte(tt.text), env(nil))
			if err == nil {
				t.Fatal("Parse succeeded, want an error for the reserved prefix")
			}
			for _, e := range configErrors(t, err) {
				if e.Line == tt.line && strings.Contains(e.Msg, `prefix "viewmux" is reserved`) {
					return
				}
			}
			t.Fatalf("no error on line %d naming the reserved prefix; got:\n%v", tt.line, err)
		})
	}
	t.Run("other prefixes and unprefixed stay valid", func(t *testing.T) {
		mustParse(t, "[upstreams.viewmux]\ncommand = \"x\"\nprefix = \"mux\"\n\n[upstreams.flat]\ncommand = \"x\"\nprefix = \"\"\n", nil)
	})
}
