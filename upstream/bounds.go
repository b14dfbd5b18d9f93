package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/time/rate"

	"github.com/viewmux/viewmux/internal/lograte"
)

// ErrCatalogBound is wrapped by the error of a catalog fetch that went past
// the upstream's max_catalog_items or max_catalog_bytes. The connection is
// then treated as broken and retried with growing backoff.
var ErrCatalogBound = errors.New("catalog exceeds its bound")

// Defaults of configs.Upstream's catalog bounds, for a config built by hand.
const (
	defaultMaxCatalogItems = 10000
	defaultMaxCatalogBytes = 8 << 20
)

// catalogBudget is what one catalog fetch may still take in: items (tools,
// prompts, resources and templates together) and bytes (their compacted
// definitions, and the cursors that led to them). It is used by one
// goroutine.
type catalogBudget struct {
	maxItems int
	maxBytes int64
	items    int
	bytes    int64
}

// newBudget returns the budget of one fetch of c's upstream, charged with
// what base keeps of the lists that are not fetched anew (kinds).
func (c *conn) newBudget(base *Catalog, kinds uint32) *catalogBudget {
	b := &catalogBudget{maxItems: c.u.cfg.MaxCatalogItems, maxBytes: c.u.cfg.MaxCatalogBytes}
	if b.maxItems <= 0 {
		b.maxItems = defaultMaxCatalogItems
	}
	if b.maxBytes <= 0 {
		b.maxBytes = defaultMaxCatalogBytes
	}
	if base == nil {
		return b
	}
	for _, kept := range []struct {
		kind uint32
		raws []json.RawMessage
		n    int
	}{
		{listTools, base.RawTools, len(base.Tools)},
		{listPrompts, base.RawPrompts, len(base.Prompts)},
		{listResources, base.RawResources, len(base.Resources)},
		{listTemplates, base.RawTemplates, len(base.ResourceTemplates)},
	} {
		if kinds&kept.kind != 0 {
			continue
		}
		b.items += kept.n
		for _, r := range kept.raws {
			b.bytes += int64(len(r))
		}
	}
	return b
}

// charge takes n items and size bytes, or fails naming the bound passed.
func (b *catalogBudget) charge(n int, size int64) error {
	b.items += n
	b.bytes += size
	switch {
	case b.items > b.maxItems:
		return fmt.Errorf("%w: more than max_catalog_items = %d tools, prompts, resources and templates", ErrCatalogBound, b.maxItems)
	case b.bytes > b.maxBytes:
		return fmt.Errorf("%w: more than max_catalog_bytes = %d bytes of definitions", ErrCatalogBound, b.maxBytes)
	}
	return nil
}

// decodePage reads one listing result, res, taking the items of its member
// key and its nextCursor. Items are read one at a time and charged to
// budget as they come, so a page past the bound stops there: nothing past
// it is kept or decoded further. Each item is compacted into one buffer for
// the page; the returned slices share it. A page that lists nothing costs
// one item, so endless empty pages end too.
func decodePage(res json.RawMessage, key string, budget *catalogBudget) (items []json.RawMessage, cursor string, err error) {
	dec := json.NewDecoder(bytes.NewReader(res))
	if err := expectDelim(dec, '{'); err != nil {
		return nil, "", err
	}
	var (
		buf  bytes.Buffer
		ends []int // end offset in buf of each item
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "", err
		}
		name, _ := tok.(string)
		switch name {
		case key:
			buf.Reset()
			ends = ends[:0]
			if err := decodeArray(dec, &buf, &ends, budget); errors.Is(err, ErrCatalogBound) {
				return nil, "", err
			} else if err != nil {
				return nil, "", fmt.Errorf("%q: %w", key, err)
			}
		case "nextCursor":
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, "", fmt.Errorf("nextCursor: %w", err)
			}
			cursor = ""
			if string(raw) != "null" {
				if err := json.Unmarshal(raw, &cursor); err != nil {
					return nil, "", fmt.Errorf("nextCursor: %w", err)
				}
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, "", err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, "", err
	}
	if len(ends) == 0 {
		if err := budget.charge(1, 0); err != nil {
			return nil, "", err
		}
	}
	if err := budget.charge(0, int64(len(cursor))); err != nil {
		return nil, "", err
	}
	all := buf.Bytes()
	items = make([]json.RawMessage, len(ends))
	start := 0
	for i, end := range ends {
		items[i] = all[start:end:end]
		start = end
	}
	return items, cursor, nil
}

// decodeArray reads a JSON array (or null) of items from dec, compacting
// each into buf and charging it to budget before the next is read.
func decodeArray(dec *json.Decoder, buf *bytes.Buffer, ends *[]int, budget *catalogBudget) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil // null: no items
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("not an array")
	}
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		before := buf.Len()
		if err := json.Compact(buf, raw); err != nil { // valid already: cannot fail
			return err
		}
		if err := budget.charge(1, int64(buf.Len()-before)); err != nil {
			return err
		}
		*ends = append(*ends, buf.Len())
	}
	_, err = dec.Token() // the closing bracket
	return err
}

// expectDelim reads the next token of dec, which must be d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("not a JSON object")
	}
	return nil
}

// The notification budget of one upstream connection: notifyRate a second
// sustained, in bursts of up to notifyBurst. list_changed is outside it
// (the refresher coalesces and damps those), and so is progress: it
// answers a client's own request for it, reaches only the call whose
// token it carries, and the load test's 16 clients alone send past 500 a
// second through viewmux's one shared connection (a progress dropped there
// is one the client would have had directly). Anything else past it is
// dropped, with a log line naming the upstream at most every
// notifyDropLogEvery.
//
// Reading a notification costs viewmux a decode even when it is dropped,
// so every notification, list_changed too, also passes the intake: past
// notifyIntakeRate a second (bursts of notifyIntakeRate), the connection's
// reader waits, and the upstream's own writes back up behind it. A flood
// then slows only the flooding upstream's own answers, and costs viewmux a
// bounded share of a core.
const (
	notifyRate         = 500
	notifyBurst        = 5000
	notifyIntakeRate   = 10000
	notifyDropLogEvery = 10 * time.Second
)

// notifyBudget rate-bounds the notifications of one connection. It is
// safe for concurrent use (streamable HTTP delivers from several streams).
type notifyBudget struct {
	once    sync.Once
	lim     *rate.Limiter // delivered
	intake  *rate.Limiter // read
	dropLog lograte.Every
}

// admit reports whether the notification method from c's upstream may be
// delivered; one that may not is counted, and logged now and then. It
// runs on the reader that read it, and waits there while the upstream is
// past the intake (see notifyIntakeRate).
func (c *conn) admit(method string) bool {
	b := &c.notes
	b.once.Do(func() {
		b.lim = rate.NewLimiter(notifyRate, notifyBurst)
		b.intake = rate.NewLimiter(notifyIntakeRate, notifyIntakeRate)
		b.dropLog.Interval = notifyDropLogEvery
	})
	if b.intake.Wait(c.ctx) != nil {
		return false // the connection is gone
	}
	if strings.HasSuffix(method, "/list_changed") || method == string(mcp.MethodNotificationSubscriptionsAcknowledged) ||
		method == string(mcp.MethodNotificationProgress) {
		return true
	}
	if b.lim.Allow() {
		return true
	}
	if ok, more := b.dropLog.Allow(); ok {
		c.u.log.Warn("dropping notifications from upstream: over its budget of "+strconv.Itoa(notifyRate)+" a second (bursts of "+strconv.Itoa(notifyBurst)+")",
			"method", method, "dropped_since_last_line", more+1)
	}
	return false
}
