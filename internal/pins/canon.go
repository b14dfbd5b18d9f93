package pins

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// pinnedKeys are the members of a tool definition that are pinned. _meta
// is not: it is annotation for clients (viewmux adds its own keys there),
// and an upstream may stamp it per listing.
var pinnedKeys = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// Canonical returns the canonical form of a tool definition and its hash:
// the pinned members of raw (a JSON object), with name set to original
// (the upstream's name, whatever viewmux exposes it as), every object's
// keys sorted, and no insignificant whitespace. Two definitions that
// differ only in key order or whitespace have the same form. Numbers keep
// their spelling.
func Canonical(original string, raw json.RawMessage) (canon json.RawMessage, hash string, err error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, "", fmt.Errorf("tool %q: definition is not a JSON object: %w", original, err)
	}
	out := make(map[string]any, len(pinnedKeys))
	for _, k := range pinnedKeys {
		v, ok := members[k]
		if !ok || k == "name" {
			continue
		}
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		var x any
		if err := d.Decode(&x); err != nil {
			return nil, "", fmt.Errorf("tool %q: %s: %w", original, k, err)
		}
		out[k] = x
	}
	out["name"] = original
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil { // maps encode with sorted keys
		return nil, "", fmt.Errorf("tool %q: %w", original, err)
	}
	canon = bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	sum := sha256.Sum256(canon)
	return canon, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ShortHash is hash cut for people: "sha256:" and 12 hex digits.
func ShortHash(hash string) string {
	if len(hash) > len("sha256:")+12 {
		return hash[:len("sha256:")+12]
	}
	return hash
}

// pretty indents a canonical definition, one member per line, for diffs.
func pretty(canon json.RawMessage) []string {
	if len(canon) == 0 {
		return nil
	}
	var b bytes.Buffer
	if err := json.Indent(&b, canon, "", "  "); err != nil {
		return []string{string(canon)}
	}
	return strings.Split(b.String(), "\n")
}
