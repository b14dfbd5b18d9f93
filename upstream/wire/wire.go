// Package wire is viewmux's client side of JSON-RPC on one upstream
// connection: it mints the ids of viewmux's own requests (strings, never
// reused, never a client's), keeps the calls waiting for answers, writes
// every message through one writer, hands the upstream's requests and
// notifications to hooks given at construction, and answers its pings.
//
// Framing belongs to a Transport (newline-delimited for stdio, one
// message per frame for websocket). A transport bounds each message: one
// over the limit fails only the call it answers (its id is found without
// buffering the message), never the connection. So does one the engine
// cannot parse (not JSON, nested too deep): its top-level id is read
// without parsing the rest, and ends the call it answers at once.
//
// A request is written once. A call whose request was written when the
// connection ended fails with ErrOutcomeUnknown: the upstream may have
// run it, and nothing sends it again.
//
// Results and error data stay the bytes the upstream sent.
package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// Frame is one message a Transport read.
type Frame struct {
	// Data is the whole message; the engine keeps it (results are slices
	// of it), so a transport must not reuse it.
	Data []byte
	// Oversize is set for a message over the transport's limit: Data is
	// nil, ID is its top-level id when one was found, and Method tells
	// that it carried a method (it is no answer).
	Oversize bool
	ID       json.RawMessage
	Method   bool
}

// Transport moves whole messages. ReadFrame is called by one goroutine
// only; WriteFrame is never called concurrently (the engine serializes
// it). Close unblocks ReadFrame, at once or once the peer is gone (a
// stdio child exits once its stdin is closed).
type Transport interface {
	// ReadFrame returns the next message. An error ends the connection;
	// an oversize message is a Frame, not an error.
	ReadFrame() (Frame, error)
	// WriteFrame writes one message. An error ends the connection, unless
	// it is (or wraps) *RefusedError. ctx ends with the connection, not
	// with the request the message belongs to (a write is never cut in
	// half), but carries that request's values: a transport that sends
	// each message as an HTTP request puts its trace context in headers.
	WriteFrame(ctx context.Context, msg []byte) error
	Close() error
}

// Error is a JSON-RPC error object, kept exactly as sent: Data holds the
// bytes of the upstream's data member. A hook returning one (wrapped or
// not) answers the peer with it.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("upstream answered with JSON-RPC error %d: %s", e.Code, e.Message)
}

// JSON-RPC error codes the engine answers with.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInternalError  = -32603
)

var (
	// ErrClosed is returned, wrapped with the cause, by calls on a
	// connection that is gone.
	ErrClosed = errors.New("connection closed")
	// ErrTooLarge is what a TooLargeError is (errors.Is).
	ErrTooLarge = errors.New("result too large")
	// ErrOutcomeUnknown is what a call fails with (errors.Is), besides
	// ErrClosed, when the connection ended after its request was written
	// and before its answer came: the upstream may have received the
	// request and acted on it, or not. The engine never sends a request
	// twice, and a caller must not either.
	ErrOutcomeUnknown = errors.New("the connection ended after the call was sent; it may or may not have run")
	// ErrNotSent marks (errors.Is) a WriteFrame error after which the
	// message is known not to have been taken: none of its bytes left (a
	// dial failed, nothing was written), or the peer refused it whole
	// before reading it as a request (an SSE endpoint that no longer knows
	// the session). A call whose write failed so fails with ErrClosed
	// alone; any other failed write leaves the call's outcome unknown.
	ErrNotSent = errors.New("nothing was sent")
	// ErrUnreadable is what an UnreadableError is (errors.Is).
	ErrUnreadable = errors.New("unreadable answer")
)

// UnreadableError fails a call whose answer the engine refused to parse
// (not JSON, nested too deep): its id could be read, the rest not.
type UnreadableError struct {
	Reason error // why the answer was refused
}

func (e *UnreadableError) Error() string {
	return "sent an answer viewmux cannot read: " + e.Reason.Error()
}

// Is makes errors.Is(err, ErrUnreadable) hold.
func (e *UnreadableError) Is(target error) bool { return target == ErrUnreadable }

// Unwrap returns the reason.
func (e *UnreadableError) Unwrap() error { return e.Reason }

// RefusedError is a WriteFrame error after which the connection stays
// up: the peer received the message and refused that message alone (an
// HTTP endpoint's 4xx to one POST). Only the write that returned it fails.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// TooLargeError fails a call whose answer exceeded the transport's size
// limit.
type TooLargeError struct {
	Limit int64 // bytes
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("result too large: the upstream's answer exceeds max_message_bytes (%d bytes)", e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Options are the hooks and names of a Conn, fixed at construction.
type Options struct {
	// Name names the upstream in errors.
	Name string
	// Limit is the transport's per-message limit, for errors.
	Limit int64
	// IDPrefix starts every id the Conn mints; "" = "viewmux-".
	IDPrefix string
	// Logger receives what the engine drops; nil discards.
	Logger *slog.Logger
	// OnNotification receives each notification from the upstream, in
	// order, on the goroutine that read it: it must not block. Params are
	// bytes of the message (nil when absent). tied is the id of the call
	// whose own response stream carried it (see Dispatch), "" when it
	// arrived untied. nil drops them.
	OnNotification func(tied, method string, params json.RawMessage)
	// OnRequest answers a request from the upstream (other than ping,
	// which the Conn answers). It runs on its own goroutine with a ctx
	// that ends when the upstream cancels the request or the connection
	// ends. An error that is (or wraps) *Error goes back as that error;
	// any other as an internal error with its text. tied is as for
	// OnNotification. nil answers every request with method not found.
	OnRequest func(ctx context.Context, tied, method string, params json.RawMessage) (json.RawMessage, error)
	// OnLost is called once, from the reader goroutine, when the
	// connection ends other than through Close. nil = ignored.
	OnLost func(error)
}

// Conn is one JSON-RPC connection, client side. Its methods are safe for
// concurrent use.
type Conn struct {
	t    Transport
	opts Options
	log  *slog.Logger

	seq   atomic.Uint64
	wlock chan struct{} // capacity 1: the one writer

	life context.Context // ends with the connection; handlers run under it
	stop context.CancelFunc
	done chan struct{} // closed once the connection is gone

	mu       sync.Mutex
	pending  map[string]chan answer
	incoming map[string]context.CancelFunc // the upstream's requests being answered
	cause    error
	closing  bool
	finished bool

	wg        sync.WaitGroup
	closeOnce sync.Once
}

type answer struct {
	result json.RawMessage
	err    error
}

// New returns a Conn over t. Nothing is read until Start.
func New(t Transport, opts Options) *Conn {
	if opts.IDPrefix == "" {
		opts.IDPrefix = "viewmux-"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Conn{
		t:        t,
		opts:     opts,
		log:      log,
		wlock:    make(chan struct{}, 1),
		done:     make(chan struct{}),
		pending:  make(map[string]chan answer),
		incoming: make(map[string]context.CancelFunc),
	}
	c.life, c.stop = context.WithCancel(context.Background())
	return c
}

// Start launches the reader.
func (c *Conn) Start() {
	c.wg.Go(c.readLoop)
}

// Done is closed once the connection is gone (lost or closed).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, or nil while it lives.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// Call sends a request, once, and returns the upstream's result bytes. A
// JSON-RPC error answer is returned as *Error. When ctx ends first, the
// upstream is sent notifications/cancelled naming the request's id, and
// ctx's error is returned. An answer over the size limit fails with
// ErrTooLarge, one that cannot be parsed with *UnreadableError, a lost
// connection with ErrClosed: also ErrOutcomeUnknown once the request may
// have left. A ctx that ends with a cause that is (or wraps) ErrClosed
// tells that the connection is gone (its caller watches it by other
// means, such as a stdio child's exit): the call fails as if the
// connection had ended, and no cancel notice is sent.
func (c *Conn) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := c.opts.IDPrefix + strconv.FormatUint(c.seq.Add(1), 10)
	ch := make(chan answer, 1)
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		return nil, c.closedErr()
	}
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}

	msg := request(id, method, params)
	if partial, err := c.write(ctx, msg); err != nil {
		forget()
		if partial {
			return nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return nil, err
	}
	// From here on the upstream may have the request: a connection that
	// ends leaves the call's outcome unknown (end answers it so too).
	select {
	case a := <-ch:
		return a.result, a.err
	case <-ctx.Done():
		forget()
		select {
		case a := <-ch: // answered meanwhile
			return a.result, a.err
		default:
		}
		if cause := context.Cause(ctx); errors.Is(cause, ErrClosed) {
			return nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, cause)
		}
		c.cancelNotice(id)
		return nil, ctx.Err()
	case <-c.done:
		forget()
		select {
		case a := <-ch:
			return a.result, a.err
		default:
		}
		return nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, c.closedErr())
	}
}

// cancelNoticeTimeout bounds the notifications/cancelled sent for a call
// whose caller went away.
const cancelNoticeTimeout = 5 * time.Second

// cancelNotice tells the upstream, off the caller's path, to stop working
// on request id.
func (c *Conn) cancelNotice(id string) {
	params, _ := json.Marshal(map[string]string{"requestId": id, "reason": "the client cancelled the request"})
	c.mu.Lock()
	if c.finished { // Wait may be running: start nothing
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.life, cancelNoticeTimeout)
		defer cancel()
		if err := c.Notify(ctx, "notifications/cancelled", params); err != nil {
			c.log.Debug("notifications/cancelled not sent", "err", err)
		}
	}()
}

// Notify sends a notification; params may be nil.
func (c *Conn) Notify(ctx context.Context, method string, params json.RawMessage) error {
	_, err := c.write(ctx, notification(method, params))
	return err
}

// write sends msg through the one writer. ctx bounds the wait for the
// writer, not the write. A failed write ends the connection; partial
// reports that the write failed after some of msg may have left (the
// transport did not say ErrNotSent).
func (c *Conn) write(ctx context.Context, msg []byte) (partial bool, _ error) {
	select {
	case c.wlock <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-c.done:
		return false, c.closedErr()
	}
	defer func() { <-c.wlock }()
	select {
	case <-c.done:
		return false, c.closedErr()
	default:
	}
	if err := c.t.WriteFrame(frameCtx{c.life, ctx}, msg); err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			return false, err
		}
		c.end(fmt.Errorf("write: %w", err), true)
		return !errors.Is(err, ErrNotSent), c.closedErr()
	}
	return false, nil
}

// frameCtx is the ctx of a WriteFrame: the connection's life, for
// cancellation and deadlines, with the values of the ctx of the request
// the message belongs to where the life has none. The life's come first,
// so that the context package, which finds a parent's cancellation
// through Value, finds the life's (context.Cause, WithCancel).
type frameCtx struct {
	context.Context                 // the connection's life
	values          context.Context // the request's
}

func (f frameCtx) Value(key any) any {
	if v := f.Context.Value(key); v != nil {
		return v
	}
	return f.values.Value(key)
}

// closedErr is the error of an operation on a connection that is gone.
func (c *Conn) closedErr() error {
	c.mu.Lock()
	cause := c.cause
	c.mu.Unlock()
	if cause == nil {
		return ErrClosed
	}
	return fmt.Errorf("%w: %w", ErrClosed, cause)
}

// Close ends the connection: pending calls fail with ErrClosed (and
// ErrOutcomeUnknown) and the transport is closed. It does not wait (a stdio child may take its time
// to exit); Wait does. Idempotent.
func (c *Conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		c.end(errors.New("connection closed by viewmux"), false)
		err = c.t.Close()
	})
	return err
}

// Wait waits for every goroutine the Conn started: the reader (which ends
// once the transport's reads do) and the request handlers.
func (c *Conn) Wait() { c.wg.Wait() }

// end records that the connection is gone (the first cause wins), fails
// pending calls and, when report is set and Close was not called, tells
// OnLost.
func (c *Conn) end(cause error, report bool) {
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		return
	}
	c.finished = true
	c.cause = cause
	pending := c.pending
	c.pending = map[string]chan answer{}
	lost := report && !c.closing
	c.mu.Unlock()
	c.stop()
	close(c.done)
	// Only a call whose request was written reads this answer: one still
	// waiting to write fails in write, with nothing sent.
	err := fmt.Errorf("%w: %w: %w", ErrOutcomeUnknown, ErrClosed, cause)
	for _, ch := range pending {
		ch <- answer{err: err}
	}
	if lost && c.opts.OnLost != nil {
		c.opts.OnLost(cause)
	}
}

// readLoop is the only reader. When it returns the connection is gone.
func (c *Conn) readLoop() {
	cause := errors.New("reader ended")
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("panic in the upstream reader", "panic", r, "stack", string(debug.Stack()))
			cause = fmt.Errorf("panic in the upstream reader: %v", r)
			c.t.Close()
		}
		c.end(cause, true)
	}()
	for {
		f, err := c.t.ReadFrame()
		if err != nil {
			cause = err
			return
		}
		c.Dispatch(f, "")
	}
}

// Dispatch handles one frame from the upstream. The reader calls it for
// every frame of the Transport; a transport on which a call's own response
// stream carries frames (streamable HTTP) hands those here too, with tied
// set to the id of that call, so that whatever arrives on it (progress, a
// log, a server→client request) is known to belong to that call. Frames
// of one stream must be dispatched in order, from one goroutine.
func (c *Conn) Dispatch(f Frame, tied string) {
	if f.Oversize {
		c.oversize(f)
		return
	}
	c.dispatch(f.Data, tied)
}

// oversize fails the call a message over the limit answers, if any.
func (c *Conn) oversize(f Frame) {
	tooLarge := &TooLargeError{Limit: c.opts.Limit}
	dropped := fmt.Errorf("message exceeds max_message_bytes (%d bytes)", c.opts.Limit)
	if f.Method && len(f.ID) > 0 && string(f.ID) != "null" {
		// A request from the upstream: answer it, so that it does not wait
		// for ever.
		c.log.Error("refusing a request from upstream", "err", dropped, "id", string(f.ID))
		e := &Error{Code: CodeInvalidRequest, Message: dropped.Error()}
		id := f.ID
		c.wg.Go(func() { c.respond(id, nil, e) }) // on the reader: no race with Wait
		return
	}
	id, ok := stringID(f.ID)
	if f.Method || !ok {
		c.log.Error("dropping a message from upstream", "err", dropped, "id", string(f.ID), "has_method", f.Method)
		return
	}
	if !c.deliver(id, answer{err: tooLarge}) {
		c.log.Error("dropping a message from upstream; no call waits for its id", "err", dropped, "id", string(f.ID))
		return
	}
	c.log.Warn("failing the call the upstream's answer is too large for; the connection stays up", "err", tooLarge, "id", id)
}

// deliver hands a to the call waiting under id and reports whether one
// was.
func (c *Conn) deliver(id string, a answer) bool {
	c.mu.Lock()
	ch, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ok {
		ch <- a // buffered, and the id was removed: never blocks
	}
	return ok
}

// stringID decodes a JSON string id; ids viewmux mints are strings, so
// anything else answers no call of ours.
func stringID(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 && raw[len(raw)-1] == '"' {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// dispatch routes one message from the upstream.
func (c *Conn) dispatch(data []byte, tied string) {
	m, err := jsonrpc.ParseUpstream(data)
	switch {
	case err != nil:
		c.unreadable(data, err)
	case m.Method != "" && m.HasID():
		c.request(m, tied)
	case m.Method != "":
		c.notification(m, tied)
	case m.HasID():
		c.response(m)
	default:
		c.log.Warn("dropping a message from upstream with neither method nor id")
	}
}

// unreadable handles a message that does not parse (reason says why):
// its top-level id, read without parsing the rest (jsonrpc.TopLevelID), fails at
// once the call it answers, or answers the upstream's request it is, so
// that neither waits for a timeout.
func (c *Conn) unreadable(data []byte, reason error) {
	raw, method := jsonrpc.TopLevelID(data)
	if method {
		if !plainID(raw) {
			c.log.Warn("dropping a message from upstream that viewmux cannot read", "err", reason)
			return
		}
		c.log.Error("refusing a request from upstream that viewmux cannot read", "err", reason, "id", string(raw))
		e := &Error{Code: CodeParseError, Message: "viewmux cannot read the request: " + reason.Error()}
		c.wg.Go(func() { c.respond(raw, nil, e) }) // on the reader: no race with Wait
		return
	}
	id, ok := stringID(raw)
	if !ok || !c.deliver(id, answer{err: &UnreadableError{Reason: reason}}) {
		c.log.Warn("dropping a message from upstream that is not a JSON-RPC object", "err", reason, "id", string(raw))
		return
	}
	c.log.Warn("failing the call whose answer viewmux cannot read; the connection stays up", "err", reason, "id", id)
}

// plainID reports whether raw, an id read from a message that does not
// parse, is a JSON string or number, which an answer may echo.
func plainID(raw json.RawMessage) bool {
	if len(raw) == 0 || jsonrpc.Valid(raw) != nil {
		return false
	}
	return raw[0] == '"' || raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'
}

func (c *Conn) response(m *jsonrpc.Message) {
	id, ok := stringID(m.ID)
	var a answer
	switch {
	case len(m.Error) > 0 && string(m.Error) != "null":
		e := &Error{}
		if err := json.Unmarshal(m.Error, e); err != nil {
			a.err = fmt.Errorf("the upstream's error answer is malformed: %w", err)
		} else {
			a.err = e
		}
	case len(m.Result) > 0:
		a.result = m.Result
	default:
		a.err = errors.New("the upstream's answer holds neither a result nor an error")
	}
	if !ok || !c.deliver(id, a) {
		c.log.Debug("dropping an answer from upstream no call waits for", "id", string(m.ID))
	}
}

func (c *Conn) notification(m *jsonrpc.Message, tied string) {
	if m.Method == "notifications/cancelled" {
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(m.Params, &p) == nil && len(p.RequestID) > 0 {
			c.mu.Lock()
			cancel := c.incoming[string(p.RequestID)]
			c.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		}
	}
	if h := c.opts.OnNotification; h != nil {
		h(tied, m.Method, m.Params)
	}
}

// request answers a request from the upstream, each on a goroutine of its
// own: a handler waiting on a client, or a write waiting on a peer that is
// itself waiting for viewmux to read, never stalls the reader.
func (c *Conn) request(m *jsonrpc.Message, tied string) {
	id := m.ID
	if m.Method == "ping" {
		c.wg.Go(func() { c.respond(id, json.RawMessage("{}"), nil) }) // the reader holds a count: no race with Wait
		return
	}
	h := c.opts.OnRequest
	if h == nil {
		e := &Error{Code: CodeMethodNotFound, Message: "method not found: " + jsonrpc.Printable(m.Method)}
		c.wg.Go(func() { c.respond(id, nil, e) })
		return
	}
	key := string(id)
	ctx, cancel := context.WithCancel(c.life)
	c.mu.Lock()
	if _, dup := c.incoming[key]; dup {
		c.mu.Unlock()
		cancel()
		e := &Error{Code: CodeInvalidRequest, Message: "request id " + jsonrpc.Printable(key) + " is already in use"}
		c.wg.Go(func() { c.respond(id, nil, e) })
		return
	}
	c.incoming[key] = cancel
	c.mu.Unlock()
	method, params := m.Method, m.Params
	c.wg.Go(func() {
		defer func() {
			c.mu.Lock()
			delete(c.incoming, key)
			c.mu.Unlock()
			cancel()
		}()
		var (
			res json.RawMessage
			err error
		)
		func() {
			defer func() {
				if r := recover(); r != nil {
					c.log.Error("panic answering an upstream request", "method", method, "panic", r, "stack", string(debug.Stack()))
					err = errors.New("internal error")
				}
			}()
			res, err = h(ctx, tied, method, params)
		}()
		if err != nil {
			var (
				e  *Error
				je *jsonrpc.Error
			)
			switch {
			case errors.As(err, &e):
			case errors.As(err, &je):
				e = (*Error)(je)
			default:
				e = &Error{Code: CodeInternalError, Message: err.Error()}
			}
			c.respond(id, nil, e)
			return
		}
		c.respond(id, res, nil)
	})
}

// respond writes an answer to the upstream's request id, echoing the id's
// bytes as sent.
func (c *Conn) respond(id, result json.RawMessage, e *Error) {
	var msg []byte
	if e != nil {
		msg = jsonrpc.ErrorResponse(id, (*jsonrpc.Error)(e))
	} else {
		if len(result) == 0 {
			result = json.RawMessage("{}")
		}
		msg = jsonrpc.Response(id, result)
	}
	if _, err := c.write(c.life, msg); err != nil {
		c.log.Debug("answer to an upstream request not sent", "err", err)
	}
}

// request encodes a request with params spliced in as bytes.
func request(id, method string, params json.RawMessage) []byte {
	// Room for the JSON around them and a transport's newline.
	b := make([]byte, 0, len(params)+len(method)+len(id)+64)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = appendString(b, id)
	b = append(b, `,"method":`...)
	b = appendString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

func notification(method string, params json.RawMessage) []byte {
	b := make([]byte, 0, len(params)+len(method)+64)
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = appendString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// appendString appends s as a JSON string: as it is between quotes when
// it holds only printable ASCII other than quote and backslash (every id
// and method viewmux sends), else through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
