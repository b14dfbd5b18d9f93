//go:build unix

package adversarial

import (
	"encoding/json"
	"strings"
	"testing"
)

// recWithout returns the JSON object obj without the listed top-level
// keys and without io.modelcontextprotocol/* keys in its _meta (a _meta
// left empty is removed): the parts of a message that belong to one hop.
func recWithout(t testing.TB, obj []byte, keys ...string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, obj)
	}
	for _, k := range keys {
		delete(m, k)
	}
	if raw, ok := m["_meta"]; ok {
		var meta map[string]json.RawMessage
		if err := json.Unmarshal(raw, &meta); err == nil {
			for k := range meta {
				if strings.HasPrefix(k, "io.modelcontextprotocol/") {
					delete(meta, k)
				}
			}
			if len(meta) == 0 {
				delete(m, "_meta")
			} else {
				m["_meta"], _ = json.Marshal(meta)
			}
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// recReservedMeta returns the io.modelcontextprotocol/* keys of a params
// or result object's _meta, with their values as JSON text.
func recReservedMeta(t testing.TB, obj map[string]json.RawMessage) map[string]string {
	t.Helper()
	out := map[string]string{}
	raw, ok := obj["_meta"]
	if !ok {
		return out
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Errorf("_meta is not an object: %s", raw)
		return out
	}
	for k, v := range meta {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			out[k] = string(v)
		}
	}
	return out
}
