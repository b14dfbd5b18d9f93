package upstream

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestDecodePage reads listing pages against a budget: items are kept as
// compacted bytes, and the page stops at the first item past the bound.
func TestDecodePage(t *testing.T) {
	many := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf(`{"name": "t%d"}`, i)
		}
		return `{"tools": [` + strings.Join(items, ", ") + `]}`
	}
	for _, tc := range []struct {
		name       string
		page       string
		maxItems   int
		maxBytes   int64
		wantItems  []string
		wantCursor string
		wantErr    string
	}{
		{name: "items and cursor", page: `{"tools": [ {"name": "a"}, {"name" : "b"} ], "nextCursor": "c1", "_meta": {}}`,
			maxItems: 10, maxBytes: 1000, wantItems: []string{`{"name":"a"}`, `{"name":"b"}`}, wantCursor: "c1"},
		{name: "null cursor and items", page: `{"tools": null, "nextCursor": null}`, maxItems: 10, maxBytes: 1000},
		{name: "the last member wins", page: `{"tools": [{"name": "a"}], "tools": [{"name": "b"}]}`,
			maxItems: 10, maxBytes: 1000, wantItems: []string{`{"name":"b"}`}},
		{name: "past max items", page: many(11), maxItems: 10, maxBytes: 1 << 20, wantErr: "max_catalog_items = 10"},
		{name: "at max items", page: many(10), maxItems: 10, maxBytes: 1 << 20, wantItems: func() []string {
			var s []string
			for i := range 10 {
				s = append(s, fmt.Sprintf(`{"name":"t%d"}`, i))
			}
			return s
		}()},
		{name: "past max bytes", page: many(10), maxItems: 100, maxBytes: 50, wantErr: "max_catalog_bytes = 50"},
		{name: "an empty page costs one item", page: `{"tools": []}`, maxItems: 0, maxBytes: 100, wantErr: "max_catalog_items = 0"},
		{name: "a cursor costs its bytes", page: `{"tools": [], "nextCursor": "` + strings.Repeat("c", 200) + `"}`,
			maxItems: 10, maxBytes: 100, wantErr: "max_catalog_bytes = 100"},
		{name: "not an object", page: `[1]`, maxItems: 10, maxBytes: 100, wantErr: "not a JSON object"},
		{name: "items not an array", page: `{"tools": {}}`, maxItems: 10, maxBytes: 100, wantErr: "not an array"},
		{name: "cursor not a string", page: `{"tools": [], "nextCursor": 5}`, maxItems: 10, maxBytes: 100, wantErr: "nextCursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &catalogBudget{maxItems: tc.maxItems, maxBytes: tc.maxBytes}
			items, cursor, err := decodePage([]byte(tc.page), "tools", b)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if strings.HasPrefix(tc.wantErr, "max_catalog") && !errors.Is(err, ErrCatalogBound) {
					t.Errorf("err = %v, not ErrCatalogBound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cursor != tc.wantCursor {
				t.Errorf("cursor = %q, want %q", cursor, tc.wantCursor)
			}
			var got []string
			for _, it := range items {
				got = append(got, string(it))
			}
			if strings.Join(got, "\n") != strings.Join(tc.wantItems, "\n") {
				t.Errorf("items = %q, want %q", got, tc.wantItems)
			}
		})
	}
}
