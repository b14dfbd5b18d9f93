package toolsearch

import (
	"encoding/json"
	"maps"
	"slices"
)

// FromDefinition returns the Doc of a tool definition as tools/list lists
// it (name, title, description, inputSchema's properties and their
// descriptions), for the upstream named upstream. A definition that does
// not decode gives the Doc of what did; a property whose description is
// not a string counts by its name alone. Arguments are in name order.
func FromDefinition(def json.RawMessage, upstream string) Doc {
	var t struct {
		Name        string `json:"name"`
		Title       string `json:"title"`
		Description string `json:"description"`
		InputSchema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"inputSchema"`
	}
	json.Unmarshal(def, &t) // what decodes is indexed; a tool with a broken schema is still found by name
	d := Doc{Name: t.Name, Title: t.Title, Description: t.Description, Upstream: upstream}
	for _, name := range slices.Sorted(maps.Keys(t.InputSchema.Properties)) {
		var p struct {
			Description string `json:"description"`
		}
		json.Unmarshal(t.InputSchema.Properties[name], &p)
		d.Args = append(d.Args, Arg{Name: name, Description: p.Description})
	}
	return d
}
