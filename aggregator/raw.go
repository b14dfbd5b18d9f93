package aggregator

import (
	"encoding/json"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// This file makes the exposed bytes of a definition: the upstream's own
// bytes with only what viewmux must change spliced in, the exposed name (or
// rewritten URI), viewmux's _meta keys, and the original name as title where
// the upstream gave none. Nothing is decoded and re-encoded, so nothing is
// added (no empty annotations) or dropped ("required": false stays) on the
// way.

// rawAt returns raws[i], or nil when the catalog holds no bytes for item i
// (a catalog built by hand).
func rawAt(raws []json.RawMessage, i int) json.RawMessage {
	if i < len(raws) {
		return raws[i]
	}
	return nil
}

// exposedRaw returns raw with member key set to exposed and meta set in
// its _meta; nothing else is added (no title: the original name is in
// _meta). It
// returns nil when raw is nil or cannot be spliced (then the definition is
// encoded from its decoded form, filter.Entry.Encoded).
func exposedRaw(raw json.RawMessage, key, exposed string, meta []jsonrpc.Member) json.RawMessage {
	return splicedRaw(raw, []jsonrpc.Member{{Key: key, Value: jsonString(exposed)}}, meta)
}

// splicedRaw is exposedRaw for several members: raw with each member of
// set given its value and meta set in its _meta (a tool's name, and what
// its override changes).
func splicedRaw(raw json.RawMessage, set, meta []jsonrpc.Member) json.RawMessage {
	if raw == nil {
		return nil
	}
	out, err := jsonrpc.Splice(raw, set, nil, meta)
	if err != nil {
		return nil
	}
	return out
}

// jsonString encodes s as a JSON string.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always encodes
	return b
}
