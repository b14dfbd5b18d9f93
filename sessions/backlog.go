package sessions

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// maxCallsPerSession bounds the routed calls one session has in flight on
// /mcp, as the worker pool does on the stream doors (streamWorkers).
const maxCallsPerSession = streamWorkers

// errSlowClient ends a session whose client does not read what it is sent
// fast enough: the frames and answers waiting for it went past
// server.max_pending_bytes.
var errSlowClient = errors.New("the client is not reading: its unread frames and answers went past server.max_pending_bytes")

// backlog is what viewmux holds for one session's client: the bytes of
// frames and answers made for it and not yet written, and its routed calls
// in flight. While the bytes are at server.max_pending_bytes or more, the
// session's new calls are refused as busy; a frame that would take them
// past it ends the session instead (frameQueue.put), since a frame may be
// neither dropped nor held without bound. It is safe for concurrent use;
// the zero value has no limit.
type backlog struct {
	max   int64 // server.max_pending_bytes; 0 = none
	calls int32 // in flight at most; 0 = none
	bytes atomic.Int64
	n     atomic.Int32
	// unread and who count the bytes in the caller's total too (nil: not
	// counted); Server.newBacklog sets them.
	unread *callerBytes
	who    string
}

func newBacklog(maxBytes int64, calls int) *backlog {
	return &backlog{max: maxBytes, calls: int32(calls)}
}

// newBacklog returns the backlog of a session or request of who's, whose
// bytes count in who's total (server.max_pending_bytes_per_caller) as
// well: at most maxBytes and calls in flight of its own (0: no limit).
func (s *Server) newBacklog(who string, maxBytes int64, calls int) *backlog {
	b := newBacklog(maxBytes, calls)
	b.unread, b.who = &s.unread, who
	return b
}

// admit takes a call slot for a new routed call, or refuses it with the
// busy error to answer it with. The returned func gives the slot back.
func (b *backlog) admit() (done func(), refusal *jsonrpc.Error) {
	if b == nil {
		return func() {}, nil
	}
	if b.max > 0 {
		if held := b.bytes.Load(); held >= b.max {
			return nil, &jsonrpc.Error{Code: errBusyCode, Message: fmt.Sprintf(
				"session busy: %d bytes of answers and notifications wait for the client to read them (server.max_pending_bytes is %d); read them before sending more requests",
				held, b.max)}
		}
	}
	if n := b.n.Add(1); b.calls > 0 && n > b.calls {
		b.n.Add(-1)
		return nil, &jsonrpc.Error{Code: errBusyCode, Message: fmt.Sprintf(
			"session busy: %d calls in flight, the most one session may have; wait for an answer before sending more", b.calls)}
	}
	var once sync.Once
	return func() { once.Do(func() { b.n.Add(-1) }) }, nil
}

// hold counts n more bytes waiting for the client and reports whether they
// stay within the limit.
func (b *backlog) hold(n int) bool {
	if b == nil {
		return true
	}
	b.unread.add(b.who, int64(n))
	return b.bytes.Add(int64(n)) <= b.max || b.max == 0
}

// smallAnswer is the size up to which an answer is held for its client
// whatever its caller holds (holdAnswer): a busy error in its place would
// save nothing.
const smallAnswer = 64 << 10

// holdAnswer counts an answer of n bytes (its frame, and the buffers lent
// to it) as waiting for the client, like hold, unless its caller's share
// has no room for it (callerBytes.reserve): then it counts nothing and
// returns the busy error to answer the call with instead. The call has
// run, and the error says so.
func (b *backlog) holdAnswer(n int) *jsonrpc.Error {
	if b == nil {
		return nil
	}
	if n > smallAnswer {
		if ok, held := b.unread.reserve(b.who, int64(n)); !ok {
			return &jsonrpc.Error{Code: errBusyCode, Message: fmt.Sprintf(
				"caller busy: the call ran, but its answer (%d bytes) was let go: %d bytes of answers and notifications already wait for this caller's clients to read them, over all its sessions and requests (server.max_pending_bytes_per_caller is %d); read them before sending more requests",
				n, held, b.unread.max)}
		}
	} else {
		b.unread.add(b.who, int64(n))
	}
	b.bytes.Add(int64(n))
	return nil
}

// written counts n bytes held as written (or given up).
func (b *backlog) written(n int) {
	if b != nil {
		b.unread.add(b.who, -int64(n))
		b.bytes.Add(-int64(n))
	}
}

// held returns the bytes waiting for the client.
func (b *backlog) held() int64 {
	if b == nil {
		return 0
	}
	return b.bytes.Load()
}

// frameQueue holds the frames one call produces (progress, log messages,
// server→client requests) until its writer writes them. put never blocks,
// so an upstream's reader is never held up by one client, and never drops:
// each frame is counted in the session's backlog, and one that takes it
// past the limit ends the session through overflow. It is safe for
// concurrent use by producers and one writer.
type frameQueue struct {
	mu       sync.Mutex
	frames   [][]byte
	ready    chan struct{} // capacity 1: frames were put since the last take
	held     *backlog      // nil: not counted
	overflow func()        // called once when a put goes past the limit
	over     bool
	settled  bool              // handed off: frames go to late
	late     func([]byte) bool // after handoff; nil = let go
}

func newFrameQueue(held *backlog, overflow func()) *frameQueue {
	return &frameQueue{ready: make(chan struct{}, 1), held: held, overflow: overflow}
}

// put queues f for the writer. It reports false when f took the session's
// backlog past its limit; f is then not queued, and overflow has been
// called (once per queue).
func (q *frameQueue) put(f []byte) bool {
	q.mu.Lock()
	if q.settled {
		defer q.mu.Unlock()
		return q.late != nil && q.late(f)
	}
	if q.over {
		q.mu.Unlock()
		return false
	}
	if !q.held.hold(len(f)) {
		q.held.written(len(f))
		q.over = true
		q.mu.Unlock()
		if q.overflow != nil {
			q.overflow()
		}
		return false
	}
	q.frames = append(q.frames, f)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// signal returns a channel that receives after frames were put.
func (q *frameQueue) signal() <-chan struct{} { return q.ready }

// drain writes every queued frame with write, in order, counting each one
// written once write returns.
func (q *frameQueue) drain(write func([]byte)) {
	for {
		q.mu.Lock()
		fs := q.frames
		q.frames = nil
		q.mu.Unlock()
		if len(fs) == 0 {
			return
		}
		for _, f := range fs {
			write(f)
			q.held.written(len(f))
		}
	}
}

// handoff ends the queue's life as a queue: the frames it holds, and every
// frame put from now on, go to late in order instead (nil: they are let
// go). late must not block: it is called under the queue's lock, which
// keeps that order, and put is called from an upstream's reader.
func (q *frameQueue) handoff(late func([]byte) bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, f := range q.frames {
		q.held.written(len(f))
		if late != nil {
			late(f)
		}
	}
	q.frames = nil
	q.late = late
	q.settled = true
}

// callerBytes counts what viewmux holds for each caller's clients, over
// all of the caller's sessions and requests on every door: the bytes its
// backlogs hold (answers and frames made and not yet written), against
// server.max_pending_bytes_per_caller. A caller over it gets its new calls
// refused (admit), whatever session or request they come on, and its
// other callers are untouched. The count goes down only as bytes are
// written or given up, never when a session merely ends: what an ended
// session still holds (a write blocked until the write deadline) counts
// until it is let go, so that opening new sessions escapes nothing. Its
// zero value has no limit; it is safe for concurrent use.
type callerBytes struct {
	max int64 // 0 = no limit
	// crossed, when set, is called (outside the lock) when a caller
	// reaches its share, falls back under it, or, having reached it,
	// comes back to nothing: then what it held, and the copies its
	// answers were made from, are mostly garbage (reclaimer).
	crossed func()

	mu   sync.Mutex
	held map[string]callerHeld // no zero entries
}

// callerHeld is what one caller holds.
type callerHeld struct {
	bytes int64
	full  bool // at its share since it last held nothing
	// shed: an answer was let go for want of room (reserve) since the
	// caller last held at most half its share. Until then its new calls
	// are refused as at its share: they would only have their answers
	// let go in turn, after running upstream.
	shed bool
}

// add counts n more bytes (less, when negative) held for who. "" is
// nobody's (the stdio door's one client) and is not counted.
func (cb *callerBytes) add(who string, n int64) {
	if cb == nil || cb.max <= 0 || who == "" {
		return
	}
	cb.mu.Lock()
	crossed := cb.addLocked(who, n)
	cb.mu.Unlock()
	if crossed && cb.crossed != nil {
		cb.crossed()
	}
}

// reserve counts n more bytes held for who, as add does, unless who
// already holds some and n would take it past its share: then it counts
// nothing, reports false and returns what who holds. So a caller's share
// bounds its answers even when all of its calls were admitted at once,
// before any answer was held: each answer past the share is refused as it
// comes. One answer is always let through to a caller that holds
// nothing, however large.
func (cb *callerBytes) reserve(who string, n int64) (ok bool, held int64) {
	if cb == nil || cb.max <= 0 || who == "" {
		return true, 0
	}
	cb.mu.Lock()
	if h := cb.held[who]; h.bytes > 0 && h.bytes+n > cb.max {
		h.shed = true
		cb.held[who] = h
		cb.mu.Unlock()
		return false, h.bytes
	}
	crossed := cb.addLocked(who, n)
	cb.mu.Unlock()
	if crossed && cb.crossed != nil {
		cb.crossed()
	}
	return true, 0
}

// addLocked is add under cb.mu; it reports whether crossed is due.
func (cb *callerBytes) addLocked(who string, n int64) (crossed bool) {
	h := cb.held[who]
	was := h.bytes
	h.bytes += n
	h.full = h.full || h.bytes >= cb.max
	h.shed = h.shed && h.bytes > cb.max/2
	crossed = (was >= cb.max) != (h.bytes >= cb.max) || h.full && h.bytes == 0
	if h.bytes == 0 {
		delete(cb.held, who)
	} else {
		if cb.held == nil {
			cb.held = make(map[string]callerHeld)
		}
		cb.held[who] = h
	}
	return crossed
}

// of returns the bytes held for who.
func (cb *callerBytes) of(who string) int64 {
	if cb == nil || who == "" {
		return 0
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.held[who].bytes
}

// admit refuses a new call of who's while who holds its whole share, or
// had an answer let go since it last held at most half of it, with the
// busy error to answer it with.
func (cb *callerBytes) admit(who string) *jsonrpc.Error {
	if cb == nil || cb.max <= 0 {
		return nil
	}
	cb.mu.Lock()
	h := cb.held[who]
	cb.mu.Unlock()
	if held := h.bytes; held >= cb.max || h.shed {
		return &jsonrpc.Error{Code: errBusyCode, Message: fmt.Sprintf(
			"caller busy: %d bytes of answers and notifications wait for this caller's clients to read them, over all its sessions and requests (server.max_pending_bytes_per_caller is %d); read them before sending more requests",
			held, cb.max)}
	}
	return nil
}
