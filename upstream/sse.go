package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/viewmux/viewmux/internal/tracing"
	"github.com/viewmux/viewmux/upstream/wire"
)

// sseTransport is the legacy HTTP+SSE framing (protocol 2024-11-05) of
// viewmux's engine (wire.Transport): one GET event stream carries every
// message from the server, the first event ("endpoint") names the URL
// each message to the server is POSTed to.
//
// Each event is bounded by the message limit like the engine's other
// framings: one over it is read to its end without being kept, and only
// its id goes to the engine, so only the call it answers fails.
type sseTransport struct {
	url    *url.URL
	header map[string]string
	hc     *http.Client
	limit  int64
	log    *slog.Logger
	redact func(string) string // masks the upstream's secrets in error text

	life context.Context // ends on Close; carries the GET stream and POSTs
	stop context.CancelFunc

	// Set by Start, read-only after.
	endpoint string
	masks    []string // the endpoint's query values, masked in error text
	body     io.ReadCloser
	events   *sseReader

	closeOnce sync.Once
}

var _ wire.Transport = (*sseTransport)(nil)

// sseOptions configure an sseTransport.
type sseOptions struct {
	Header map[string]string // sent with the GET and every POST
	Client *http.Client
	Limit  int64 // per message, bytes; positive
	Logger *slog.Logger
	Redact func(string) string // nil = none
}

func newSSETransport(raw string, opts sseOptions) (*sseTransport, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("the SSE URL does not parse")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Redact == nil {
		opts.Redact = func(s string) string { return s }
	}
	t := &sseTransport{url: u, header: opts.Header, hc: opts.Client, limit: opts.Limit, log: opts.Logger, redact: opts.Redact}
	t.life, t.stop = context.WithCancel(context.Background())
	return t, nil
}

// sseHTTPClient is the HTTP client of one SSE connection, whose configured
// headers are sent only to the URL's origin (keepToOrigin): its own
// keep-alive pool for the POSTs, and no client timeout, which would cut
// the event stream. The GET is bounded by the connect timeout until the
// endpoint event arrives (Start), each event by the message limit.
func sseHTTPClient(headers map[string]string) *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = maxIdlePerUpstream
	return &http.Client{Transport: base, CheckRedirect: keepToOrigin(headerNames(headers))}
}

// errNoEventStream is the error of an SSE GET answered with anything but
// 200 and text/event-stream: whatever the URL serves, it is not a legacy
// SSE endpoint.
var errNoEventStream = errors.New("SSE stream")

// sseEndpointLimit bounds the endpoint event's data.
const sseEndpointLimit = 8 << 10

// Start opens the event stream and waits for the endpoint event, both
// bounded by ctx; the stream itself lives until Close.
func (t *sseTransport) Start(ctx context.Context) error {
	abort := context.AfterFunc(ctx, t.stop)
	defer abort()
	fail := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("no endpoint event on the SSE stream: %w", context.Cause(ctx))
		}
		return err
	}
	req, err := http.NewRequestWithContext(t.life, http.MethodGet, t.url.String(), nil)
	if err != nil {
		return errors.New("the SSE URL is not a valid request URL")
	}
	for k, v := range t.header {
		req.Header.Set(k, v)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := t.hc.Do(req)
	if err != nil {
		return fail(fmt.Errorf("SSE stream: %w", bareURLError(err)))
	}
	t.body = resp.Body
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: the server answered the GET with %s%s", errNoEventStream, resp.Status, t.excerpt(resp))
	}
	if mt := mediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return fmt.Errorf("%w: the server answered the GET with content type %q, not text/event-stream", errNoEventStream, printable(mt, 100))
	}
	t.events = &sseReader{r: bufio.NewReaderSize(resp.Body, 64<<10)}
	for {
		ev, err := t.events.next(sseEndpointLimit)
		if err != nil {
			return fail(fmt.Errorf("SSE stream ended before its endpoint event: %w", err))
		}
		if ev.typ != "endpoint" {
			t.log.Warn("ignoring an SSE event before the endpoint event", "event", printable(ev.typ, 40))
			continue
		}
		if ev.oversize {
			return fmt.Errorf("SSE endpoint event is over %d bytes", sseEndpointLimit)
		}
		if err := t.setEndpoint(string(ev.data)); err != nil {
			return err
		}
		if !abort() { // ctx ended meanwhile, and with it the stream
			return fail(context.Canceled)
		}
		return nil
	}
}

// setEndpoint resolves the endpoint event's URL against the SSE URL and
// refuses one on another origin: the configured headers (credentials) go
// with every POST.
func (t *sseTransport) setEndpoint(data string) error {
	ref, err := url.Parse(strings.TrimSpace(data))
	if err != nil {
		return errors.New("SSE endpoint event: its URL does not parse")
	}
	ep := t.url.ResolveReference(ref)
	if ep.Scheme != t.url.Scheme || !strings.EqualFold(ep.Host, t.url.Host) || ep.User != nil {
		return fmt.Errorf("SSE endpoint event names another origin (%s://%s, the stream is on %s://%s); refusing to send messages there",
			printable(ep.Scheme, 16), printable(ep.Host, 100), t.url.Scheme, t.url.Host)
	}
	ep.Fragment = ""
	t.endpoint = ep.String()
	for _, vs := range ep.Query() {
		for _, v := range vs {
			if len(v) >= 4 {
				t.masks = append(t.masks, v)
			}
		}
	}
	return nil
}

// ReadFrame implements wire.Transport: the next message event.
func (t *sseTransport) ReadFrame() (wire.Frame, error) {
	for {
		ev, err := t.events.next(t.limit)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return wire.Frame{}, errors.New("the server ended the SSE stream")
			}
			return wire.Frame{}, fmt.Errorf("SSE stream: %w", err)
		}
		switch {
		case ev.typ != "message" && ev.typ != "":
			t.log.Debug("ignoring an SSE event", "event", printable(ev.typ, 40))
		case ev.oversize:
			return ev.scan.Frame(), nil
		default:
			return wire.Frame{Data: ev.data}, nil
		}
	}
}

// sseGone are the answers to a POST that mean the session is gone: the
// connection ends and the upstream is reconnected. Any other refusal
// fails only the message.
func sseGone(status int) bool { return status == http.StatusNotFound || status == http.StatusGone }

// WriteFrame implements wire.Transport: one POST of msg to the endpoint.
func (t *sseTransport) WriteFrame(ctx context.Context, msg []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.endpoint, bytes.NewReader(msg))
	if err != nil {
		return errors.New("the SSE message endpoint is not a valid request URL")
	}
	for k, v := range t.header {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	tracing.Inject(ctx, req.Header) // the request's, whose values ctx carries (wire.Conn.write)
	resp, err := t.hc.Do(req)
	if err != nil {
		err = fmt.Errorf("POST to the SSE message endpoint: %w", bareURLError(err))
		if dialFailed(err) {
			return fmt.Errorf("%w: %w", wire.ErrNotSent, err)
		}
		return err // the message may have reached the server
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		io.CopyN(io.Discard, resp.Body, 64<<10) // lets the connection be reused
		return nil
	}
	err = fmt.Errorf("the SSE message endpoint answered a POST with %s%s", resp.Status, t.excerpt(resp))
	if sseGone(resp.StatusCode) {
		return fmt.Errorf("%w: %w", wire.ErrNotSent, err) // refused whole: the session is unknown there
	}
	return &wire.RefusedError{Err: err}
}

// dialFailed reports whether err is that of a request that never reached
// a server: its connection could not be opened (net/http sends a POST's
// body only on a connection it opened, and retries one on a fresh
// connection only when it wrote nothing on the first).
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Close implements wire.Transport: it ends the stream and any POST.
func (t *sseTransport) Close() error {
	t.closeOnce.Do(func() {
		t.stop()
		if t.body != nil {
			t.body.Close()
		}
	})
	return nil
}

// sseExcerptBytes bounds the part of a refusal's body quoted in errors.
const sseExcerptBytes = 200

// excerpt returns the start of a refusal's body for an error, ": "
// first, printable only, with the endpoint's query values and the
// upstream's secrets masked; "" for an empty body, and for an HTML page
// (a proxy's or a web server's error page), whose markup says nothing the
// status does not, as for streamable HTTP (httpPeer.refusal).
func (t *sseTransport) excerpt(resp *http.Response) string {
	if mediaType(resp.Header.Get("Content-Type")) == "text/html" {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, sseExcerptBytes))
	s := strings.TrimSpace(printable(string(b), sseExcerptBytes))
	for _, m := range t.masks {
		s = strings.ReplaceAll(s, m, "[redacted]")
	}
	s = t.redact(s)
	if s == "" {
		return ""
	}
	return ": " + s
}

// bareURLError drops the URL a *url.Error names (it may carry the session
// id or a key in its query), keeping the cause.
func bareURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// printable returns s cut to n bytes, with every rune that is not
// printable (or not UTF-8) replaced by a space.
func printable(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
}

// sseReader reads the events of a text/event-stream, each event's data
// bounded by the limit next is given.
type sseReader struct{ r *bufio.Reader }

// sseEvent is one event. An event whose data is over the limit keeps
// none of it: oversize is set and scan holds its id.
type sseEvent struct {
	typ      string
	data     []byte
	hasData  bool
	oversize bool
	scan     wire.OversizeScan
}

// sseTypeBytes bounds an event's type; longer ones name no event viewmux
// handles.
const sseTypeBytes = 64

func (e *sseEvent) add(b []byte, limit int64) {
	if e.oversize {
		e.scan.Feed(b)
		return
	}
	if int64(len(e.data))+int64(len(b)) > limit {
		e.oversize = true
		e.scan.Feed(e.data)
		e.scan.Feed(b)
		e.data = nil
		return
	}
	e.data = append(e.data, b...)
}

// next returns the next event with data (limit bounds its data). An
// event cut by the stream's end is not returned (the spec discards it).
func (s *sseReader) next(limit int64) (*sseEvent, error) {
	ev := &sseEvent{}
	for {
		chunk, err := s.r.ReadSlice('\n')
		whole := err == nil
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, err
		}
		line := chunk
		if whole {
			line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
		}
		if whole && len(line) == 0 { // blank line: the event ends
			if ev.hasData {
				return ev, nil
			}
			ev = &sseEvent{}
			continue
		}
		field, value, colon := bytes.Cut(line, []byte(":"))
		if !colon && !whole { // a field name longer than the buffer
			field = nil
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if ev.hasData {
				ev.add([]byte("\n"), limit)
			}
			ev.hasData = true
			ev.add(value, limit)
			if err := s.rest(whole, func(b []byte) { ev.add(b, limit) }); err != nil {
				return nil, err
			}
		case "event":
			ev.typ = string(value[:min(len(value), sseTypeBytes)])
			if err := s.rest(whole, nil); err != nil {
				return nil, err
			}
		default: // comments, id, retry and unknown fields
			if err := s.rest(whole, nil); err != nil {
				return nil, err
			}
		}
	}
}

// rest reads the rest of a line whose first chunk was read (whole tells
// whether that chunk ended it), handing each piece to keep (nil drops
// it).
func (s *sseReader) rest(whole bool, keep func([]byte)) error {
	for !whole {
		chunk, err := s.r.ReadSlice('\n')
		whole = err == nil
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				return io.EOF
			}
			return err
		}
		if whole {
			chunk = bytes.TrimSuffix(chunk[:len(chunk)-1], []byte("\r"))
		}
		if keep != nil {
			keep(chunk)
		}
	}
	return nil
}
