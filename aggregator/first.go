package aggregator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/upstream"
)

// This file is the first contact with a per-user upstream that has no
// operator login: its tools are listed from a user's connection (the
// listing connection, peruser.go), so before anybody connected nothing
// would be listed, and a user could not discover that there is an
// account to connect. Two things fill that gap:
//
//   - The last listing of the upstream's tools is kept in the state
//     store: tool definitions only, nothing of the user whose connection
//     listed them. A restart, or another replica, lists the real tools
//     from it before anybody has connected there; a call of one is a
//     call of the per-user upstream like any other, so a caller who has
//     not connected gets its own connect link.
//   - While no listing exists at all, the upstream shows one tool in its
//     place, PREFIX__connect (the placeholder), whose call answers with
//     the caller's own connect link, or asks through URL elicitation, as
//     a call of any tool of the upstream would. It passes profiles and
//     filters like a tool of the upstream, and is in each of its
//     toolsets; the upstream's own rules, which select among the tools
//     it lists, do not apply to it. Once a listing appears (a connect
//     through this replica or another, or a stored listing) the real
//     tools replace it in a new snapshot, and sessions whose view changed
//     are told tools/list_changed.
//
// The placeholder and the real tools never coexist: if the upstream
// lists a tool named connect, PREFIX__connect is that tool once listed.
// A call is decided against the snapshot it arrives at, so a call of
// PREFIX__connect after the swap is a call of the upstream's tool, which
// for a caller who has not connected is again its connect link.

// placeholderName is the original-name part of the placeholder's exposed
// name: PREFIX + separator + "connect".
const placeholderName = "connect"

// placeholderEntry returns the placeholder of src's upstream, named in
// its namespace and selected by its toolsets.
func (src *source) placeholderEntry(namer Namer) *filter.Entry {
	cfg := src.cfg
	t := mcp.NewTool(namer.Expose(cfg.Prefix, placeholderName),
		mcp.WithTitleAnnotation("Connect your account to "+cfg.Name),
		mcp.WithDescription(fmt.Sprintf("Connect your account to %s to use its tools. Upstream %s acts with each user's own account, and lists its tools once an account is connected: "+
			"calling this tool gives you your own link to connect yours (it works once, for ten minutes). Its tools replace this one once they are listed.", cfg.Name, cfg.Name)),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(false),
	)
	t.Meta = &mcp.Meta{AdditionalFields: map[string]any{MetaUpstream: cfg.Name}}
	e := &filter.Entry{Tool: t, Upstream: cfg.Name, ReadOnly: true, Placeholder: true}
	// It stands in for every tool of the upstream: whichever toolset
	// selects some of them selects it.
	e.Toolsets = append(e.Toolsets, cfg.Name)
	if cfg.Prefix != "" && cfg.Prefix != cfg.Name {
		e.Toolsets = append(e.Toolsets, cfg.Prefix)
	}
	for set := range src.toolsets {
		e.Toolsets = append(e.Toolsets, cfg.Name+"/"+set)
		if cfg.Prefix != "" && cfg.Prefix != cfg.Name {
			e.Toolsets = append(e.Toolsets, cfg.Prefix+"/"+set)
		}
	}
	slices.Sort(e.Toolsets)
	return e
}

// callPlaceholder answers a call of e, the placeholder of a per-user
// upstream: nothing is sent upstream. A caller who has not connected
// gets the tool error with its own connect link, or is asked to connect
// through URL elicitation, exactly as a call of a tool of the upstream;
// a connected caller is told so (its connection, opened here, lists the
// tools).
func (a *Aggregator) callPlaceholder(ctx context.Context, cl Client, e *filter.Entry) (json.RawMessage, bool, error) {
	name := e.Upstream
	method := string(mcp.MethodToolsCall)
	if u := a.perUser(name); u == nil || u.Config().Credentials != configs.CredentialsPerUser {
		// A reload made it another kind of upstream since the decision.
		return nil, false, &UpstreamError{Upstream: name, Method: method, Temporary: true,
			Err: fmt.Errorf("upstream %q: tools/call %q: no longer a per-user upstream: %w", name, e.Tool.Name, upstream.ErrDown)}
	}
	_, done, err := a.connFor(ctx, cl, name)
	if ue := notConnectedErr(err); ue != nil && a.elicitConnect(ctx, cl, name, ue) { // connect_elicit.go
		_, done, err = a.connFor(ctx, cl, name)
	}
	if done != nil {
		done()
	}
	if r := userErrorResult(err); r != nil {
		return r, true, nil
	}
	if err != nil {
		return nil, false, upstreamErr(name, method, 0, err)
	}
	text := fmt.Sprintf("Your account is connected to upstream %s. Its tools are listed in place of this one as soon as the upstream has listed them: list the tools again.", name)
	b, err := json.Marshal(map[string]any{"content": []map[string]any{{"type": "text", "text": text}}})
	return b, false, err
}

// listings are the last listings of the tools of per-user upstreams, as
// kept in the state store, and what this process has to write there. It
// is safe for concurrent use.
type listings struct {
	mu      sync.Mutex
	byName  map[string]*listing // the newest known: live, or read from the store
	live    map[string]string   // upstream → source and digest of the last live listing seen here
	pending map[string]*listing // live listings not yet written
	// writeMu serializes writes, so that the newest pending listing is
	// the last one written.
	writeMu sync.Mutex
}

// listing is one upstream's tool definitions, and what they are of.
type listing struct {
	source string            // listingSource of the upstream's url
	digest string            // of the definitions' bytes
	cat    *upstream.Catalog // Tools and RawTools only
}

// storedListing is a listing as the state store holds it: the tools'
// definitions as the upstream listed them, and a digest of the url they
// came from (never the url itself, which may hold a key). Nothing names
// a user.
type storedListing struct {
	Source string            `json:"source"`
	Tools  []json.RawMessage `json:"tools"`
}

func newListings() *listings {
	return &listings{byName: make(map[string]*listing), live: make(map[string]string), pending: make(map[string]*listing)}
}

// listingKeyPrefix starts the document key of a stored listing:
// listing-NAME.json.
const listingKeyPrefix = "listing-"

func listingKey(name string) string { return listingKeyPrefix + name + ".json" }

// isListingKey reports whether key is the document key of a stored
// listing.
func isListingKey(key string) bool {
	return strings.HasPrefix(key, listingKeyPrefix) && strings.HasSuffix(key, ".json")
}

// listingSource names where the upstream uc's tools come from: a listing
// of another url is not used.
func listingSource(uc *configs.Upstream) string {
	sum := sha256.Sum256([]byte("viewmux tool listing\x00" + uc.URL))
	return hex.EncodeToString(sum[:])
}

// toolsOf returns cat's tool definitions as bytes: the upstream's, or
// the decoded tool encoded when the catalog holds none.
func toolsOf(cat *upstream.Catalog) []json.RawMessage {
	raws := make([]json.RawMessage, len(cat.Tools))
	for i := range cat.Tools {
		if raws[i] = rawAt(cat.RawTools, i); raws[i] == nil {
			raws[i] = encodeItem(cat.Tools[i])
		}
	}
	return raws
}

// encodeItem encodes a definition held only decoded ({} if it cannot be).
func encodeItem(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// digestOf summarizes raws, a listing's definitions.
func digestOf(raws []json.RawMessage) string {
	h := sha256.New()
	for _, r := range raws {
		fmt.Fprintf(h, "%d:%s\n", len(r), r)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// keep records cat, a live listing of the per-user upstream uc: it is
// the upstream's listing from now on, and is written to the store when
// it differs from the last live listing seen here (not from the stored
// one: two replicas whose users' listings differ do not overwrite each
// other's in turn).
func (l *listings) keep(uc *configs.Upstream, cat *upstream.Catalog) {
	raws := toolsOf(cat)
	d, src := digestOf(raws), listingSource(uc)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live[uc.Name] == src+d {
		return
	}
	l.live[uc.Name] = src + d
	if cur := l.byName[uc.Name]; cur != nil && cur.digest == d && cur.source == src {
		return // the stored listing: nothing to write
	}
	kept := &listing{source: src, digest: d, cat: &upstream.Catalog{Tools: cat.Tools, RawTools: raws}}
	l.byName[uc.Name] = kept
	l.pending[uc.Name] = kept
}

// get returns the listing of uc's tools kept here, or nil when there is
// none for its url.
func (l *listings) get(uc *configs.Upstream) *upstream.Catalog {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := l.byName[uc.Name]; k != nil && k.source == listingSource(uc) {
		return k.cat
	}
	return nil
}

// listingTimeout bounds each read or write of a stored listing.
const listingTimeout = 5 * time.Second

// saveListings writes the live listings not written yet to the store,
// sealed when [state] has an encryption key. A listing that cannot be
// written, or while the store is down, stays pending: for the next
// rebuild, or the store's return (watchLogins).
func (a *Aggregator) saveListings() {
	l := a.listings
	st := a.keptState()
	if st == nil {
		l.mu.Lock()
		clear(l.pending) // nowhere to keep them: this process's memory only
		l.mu.Unlock()
		return
	}
	if h := st.Health(); !h.Up && !h.Since.IsZero() {
		return // known down: not waited on at each rebuild
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	todo := l.pending
	l.pending = make(map[string]*listing)
	l.mu.Unlock()
	for name, k := range todo {
		val, err := json.Marshal(storedListing{Source: k.source, Tools: k.cat.RawTools})
		if err == nil {
			if sl := a.loginSealer(); sl != nil {
				val = sl.Seal(listingKey(name), val)
			}
			ctx, cancel := context.WithTimeout(context.Background(), listingTimeout)
			err = st.Update(ctx, listingKey(name), func([]byte) ([]byte, error) { return val, nil })
			cancel()
		}
		if err != nil {
			a.log.Warn("per-user upstream: its listing cannot be kept in the state store", "upstream", name, "error", err)
			l.mu.Lock()
			if l.pending[name] == nil && l.byName[name] == k {
				l.pending[name] = k // not replaced since: retried at the next rebuild
			}
			l.mu.Unlock()
		}
	}
}

// loadListings reads the stored listings of the per-user upstreams that
// no connection lists now, and reports whether one changed what is kept
// here. A listing of another url, sealed with another key, plain where
// listings are sealed, or past the upstream's catalog bounds is not
// used.
func (a *Aggregator) loadListings(ctx context.Context) bool {
	st := a.keptState()
	if st == nil {
		return false
	}
	changed := false
	for _, u := range a.set.Load().ups {
		uc := u.Config()
		if !userListed(uc) || u.Catalog() != nil {
			continue
		}
		k, err := a.readListing(ctx, st, uc)
		if err != nil {
			a.log.Warn("per-user upstream: its stored listing cannot be read", "upstream", uc.Name, "error", err)
			continue
		}
		if k == nil {
			continue
		}
		l := a.listings
		l.mu.Lock()
		if cur := l.byName[uc.Name]; cur == nil || cur.digest != k.digest || cur.source != k.source {
			l.byName[uc.Name] = k
			changed = true
		}
		l.mu.Unlock()
	}
	return changed
}

// readListing reads the stored listing of uc; nil when there is none,
// or none of its url. A plain one is refused from a shared store when
// [state] has an encryption key.
func (a *Aggregator) readListing(ctx context.Context, st state.Store, uc *configs.Upstream) (*listing, error) {
	ctx, cancel := context.WithTimeout(ctx, listingTimeout)
	defer cancel()
	key := listingKey(uc.Name)
	val, err := st.Get(ctx, key)
	if err != nil || val == nil {
		return nil, err
	}
	sl := a.loginSealer()
	switch {
	case state.IsSealed(val) && sl == nil:
		return nil, fmt.Errorf("%s: %w (this replica has no state.encryption_key)", key, state.ErrOtherKey)
	case state.IsSealed(val):
		if val, err = sl.Open(key, val); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	case sl != nil && st.Engine() != "files":
		// As for logins: a shared store takes sealed listings only, so
		// that nobody without the key writes tool definitions there.
		return nil, fmt.Errorf("%s: not sealed, and this gateway seals what it keeps there: refused", key)
	}
	var sd storedListing
	if err := json.Unmarshal(val, &sd); err != nil {
		return nil, fmt.Errorf("%s: damaged, or from another version: %w", key, err)
	}
	if sd.Source != listingSource(uc) {
		return nil, nil // listed from another url: this config's upstream lists anew
	}
	if uc.MaxCatalogItems > 0 && len(sd.Tools) > uc.MaxCatalogItems {
		return nil, fmt.Errorf("%s: %d tools, past max_catalog_items (%d)", key, len(sd.Tools), uc.MaxCatalogItems)
	}
	if uc.MaxCatalogBytes > 0 && int64(len(val)) > uc.MaxCatalogBytes {
		return nil, fmt.Errorf("%s: %d bytes, past max_catalog_bytes (%d)", key, len(val), uc.MaxCatalogBytes)
	}
	cat := &upstream.Catalog{}
	for i, raw := range sd.Tools {
		t, err := upstream.DecodeTool(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: tool %d: %w", key, i, err)
		}
		cat.Tools = append(cat.Tools, t)
		cat.RawTools = append(cat.RawTools, raw)
	}
	return &listing{source: sd.Source, digest: digestOf(cat.RawTools), cat: cat}, nil
}
