package door

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// This file holds Conn, the wire half of one stream session: its one
// writer and the ordered, bounded queue in front of it, and the pool of
// workers its requests run on. What the session is (its grant, what it
// may call, its pending requests) is its Owner's.

// Limits of one Conn.
const (
	// Workers bounds the requests of one Conn handled at once.
	// Notifications and responses are handled on the reading goroutine,
	// so notifications/cancelled is read while calls run.
	Workers = 16
	// QueueLen bounds the requests waiting for a worker; beyond it
	// Enqueue refuses with ErrBusy.
	QueueLen = 64
	// outBuffer is the number of frames queued for the writer before
	// senders wait for it.
	outBuffer = 256
)

// Errors of a Conn.
var (
	// ErrClosed: the Conn has ended.
	ErrClosed = errors.New("client session closed")
	// ErrBusy: the Conn's queue (of requests for its workers, or of frames
	// for its writer) is full.
	ErrBusy = errors.New("session queue full")
	// ErrWrite: a write to the client failed or passed its deadline (the
	// client stopped reading), which ended the Conn.
	ErrWrite = errors.New("writing to the client")
)

// PanicError is the cause a Conn ends with when its writer panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("writer panic: %v", e.Value) }

// Owner is the session a Conn is the wire half of. The Conn calls it from
// its workers, its writer and whoever ends it, concurrently.
type Owner interface {
	// Serve answers the request of job on a worker; nil = no answer to
	// send (a notification's, or one the owner sent itself). It must not
	// panic.
	Serve(job *Job) []byte
	// Hold counts n bytes of a frame that waits for the client; Written
	// counts n of them written or given up.
	Hold(n int) bool
	Written(n int)
	// Ended is called once, when the Conn ends, with the first cause it
	// ended with (a *PanicError when its writer panicked), after its
	// context is done.
	Ended(cause error)
}

// Job is one client request waiting for or running on a worker.
type Job struct {
	// Ctx is the request's context, Cancel ends it; the worker calls
	// Cancel once the request is answered.
	Ctx    context.Context
	Cancel context.CancelFunc
	Raw    []byte
	Msg    *jsonrpc.Message
	// Done, when not nil, records the request's end in its session.
	Done func()
}

// Conn is the wire half of one stream session: the FrameWriter it writes
// through, the ordered queue of what goes out and its one writer
// goroutine, and the pool of workers its requests run on. It lives from
// NewConn until End is called or the parent context of NewConn is done.
// Its methods are safe for concurrent use.
type Conn struct {
	w     FrameWriter
	owner Owner

	ctx    context.Context // done once the Conn ends
	cancel context.CancelFunc

	out outQueue // everything the Conn sends, in order
	// queued counts the frames in out and the one the writer took but has
	// not written; wmu is held while a frame is written. A frame is
	// written at once, without the writer goroutine, only when nothing is
	// queued (SendFrame): whatever a goroutine queued earlier is written
	// before what it sends next.
	queued atomic.Int64
	wmu    sync.Mutex
	queue  chan *Job      // requests waiting for a worker
	wg     sync.WaitGroup // workers
	wrote  chan struct{}  // closed when the writer has stopped

	// mu is a leaf lock: nothing else is locked while it is held.
	mu      sync.Mutex
	workers int32 // running workers
	ended   bool
	cause   error
}

// NewConn starts the Conn of owner, writing through w; it ends when
// parent is done, at the latest. Its writer runs from now on; End and
// Wait stop it.
func NewConn(parent context.Context, w FrameWriter, owner Owner) *Conn {
	c := &Conn{
		w:     w,
		owner: owner,
		out:   newOutQueue(),
		queue: make(chan *Job, QueueLen),
		wrote: make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(parent)
	context.AfterFunc(c.ctx, func() { c.End(context.Cause(parent)) })
	go c.writeLoop()
	return c
}

// Context returns the Conn's context, done once it has ended.
func (c *Conn) Context() context.Context { return c.ctx }

// Done returns a channel closed when the Conn has ended.
func (c *Conn) Done() <-chan struct{} { return c.ctx.Done() }

// Ended reports whether End was called.
func (c *Conn) Ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// End stops the Conn: no new requests, the contexts of queued and running
// ones are done, and its Owner is told. Frames already queued are still
// written. It does not wait; the first cause wins. It is idempotent.
func (c *Conn) End(cause error) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	c.cause = cause
	c.mu.Unlock()
	c.cancel()
	c.owner.Ended(cause)
}

// Wait waits until the Conn's workers and writer have stopped, or ctx is
// done. Call it after End.
func (c *Conn) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		<-c.wrote
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close ends the Conn and waits for it.
func (c *Conn) Close(cause error) {
	c.End(cause)
	c.Wait(context.Background())
}

// Cause returns why the Conn ended (nil while it runs or when it ended
// normally).
func (c *Conn) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// Idle waits until no request is queued or running, or ctx is done. The
// caller must have stopped calling Enqueue.
func (c *Conn) Idle(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// --- requests ---

// Enqueue queues job for a worker, starting one if fewer than Workers
// run. It fails with ErrClosed once the Conn has ended and with ErrBusy
// when QueueLen requests wait already; the job is then the caller's to
// cancel and answer.
func (c *Conn) Enqueue(job *Job) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return ErrClosed
	}
	select {
	case c.queue <- job:
	default:
		return ErrBusy
	}
	if c.workers < Workers {
		c.workers++
		c.wg.Add(1)
		go c.work()
	}
	return nil
}

// work runs queued requests until the queue is empty.
func (c *Conn) work() {
	defer c.wg.Done()
	for {
		var job *Job
		select {
		case job = <-c.queue:
		default:
			c.mu.Lock()
			if len(c.queue) == 0 {
				c.workers--
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			continue
		}
		c.run(job)
	}
}

// run answers one request. A request cancelled by the client (or by the
// end of the Conn) before it finishes gets no answer, as the protocol
// asks.
func (c *Conn) run(job *Job) {
	defer func() {
		job.Cancel()
		if job.Done != nil {
			job.Done()
		}
	}()
	if job.Ctx.Err() != nil {
		return
	}
	resp := c.owner.Serve(job)
	if resp == nil || job.Ctx.Err() != nil {
		return
	}
	c.Send(c.ctx, resp)
}

// --- sending ---

// Send queues a frame for the writer, after what is queued already. It
// gives up when ctx is done (with ctx's error) or the Conn ends
// (ErrClosed).
func (c *Conn) Send(ctx context.Context, frame []byte) error {
	return c.SendFrame(ctx, jsonrpc.Whole(frame))
}

// SendFrame is Send for a frame in pieces (an answer around an upstream's
// result, which is written out without being joined first).
func (c *Conn) SendFrame(ctx context.Context, frame jsonrpc.Frame) error {
	return c.SendFrameThen(ctx, frame, nil)
}

// SendFrameThen is SendFrame, calling done (when not nil) once the frame
// is written or given up, whatever the outcome: then nothing of the Conn
// refers to the frame's bytes any more, and their buffers may be reused.
func (c *Conn) SendFrameThen(ctx context.Context, frame jsonrpc.Frame, done func()) error {
	n := frame.Len()
	c.owner.Hold(n) // until the writer has written it
	if c.queued.Load() == 0 && c.wmu.TryLock() {
		// Nothing waits before it: written here, which spares a wake-up
		// of the writer per answer (the stdio door's latency).
		if c.queued.Load() == 0 && c.ctx.Err() == nil {
			err := c.w.WriteFrame(frame)
			c.wmu.Unlock()
			c.owner.Written(n)
			finish(done)
			if err != nil {
				c.End(fmt.Errorf("%w: %w", ErrWrite, err))
				return ErrClosed
			}
			return nil
		}
		c.wmu.Unlock()
	}
	c.queued.Add(1)
	for !c.out.tryPut(frame, done) {
		select {
		case <-c.out.room:
		case <-ctx.Done():
			c.queued.Add(-1)
			c.owner.Written(n)
			finish(done)
			return ctx.Err()
		case <-c.ctx.Done():
			c.queued.Add(-1)
			c.owner.Written(n)
			finish(done)
			return ErrClosed
		}
	}
	return nil
}

// finish calls done, if any.
func finish(done func()) {
	if done != nil {
		done()
	}
}

// Offer queues frame for the writer if there is room now. Like every
// frame, it counts in the Owner's held bytes until it is written.
func (c *Conn) Offer(frame jsonrpc.Frame) bool {
	n := frame.Len()
	c.owner.Hold(n)
	c.queued.Add(1)
	if c.out.tryPut(frame, nil) {
		return true
	}
	c.queued.Add(-1)
	c.owner.Written(n)
	return false
}

// TrySend queues a frame for the writer if there is room now. It is for
// frames that must not wait: it fails with ErrClosed once the Conn has
// ended and with ErrBusy when its queue is full.
func (c *Conn) TrySend(frame []byte) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	if c.Offer(jsonrpc.Whole(frame)) {
		return nil
	}
	return ErrBusy
}

// writeLoop is the Conn's only writer, in the order frames were queued,
// so a call's progress precedes its result. When the Conn ends, what is
// queued is flushed, then it stops. Once it stops, the queue is closed: a
// frame is either queued before that, and written (or given up with the
// rest after a failed write), or refused.
func (c *Conn) writeLoop() {
	defer close(c.wrote)
	defer c.drop()
	defer func() {
		if v := recover(); v != nil {
			c.End(&PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	for {
		of, ok := c.out.take()
		if !ok {
			select {
			case <-c.out.ready:
			case <-c.ctx.Done():
				c.flush()
				return
			}
			continue
		}
		c.wmu.Lock()
		err := c.w.WriteFrame(of.frame)
		c.wmu.Unlock()
		c.queued.Add(-1)
		c.owner.Written(of.frame.Len())
		finish(of.done)
		if err != nil {
			c.End(fmt.Errorf("%w: %w", ErrWrite, err))
			return
		}
	}
}

// flush writes whatever is queued when the Conn ends, without waiting for
// more, and closes the queue once it is empty (drain).
func (c *Conn) flush() { c.drain(true) }

// drop closes the queue and gives up what is left in it: after a failed
// write, or a panic, nothing more is written.
func (c *Conn) drop() { c.drain(false) }

// drain takes every frame left in the queue, writing each while write
// holds and no write has failed, and closes the queue once it is empty:
// no frame queued before that is left behind. Each frame's bytes are
// given back to the Owner, written or not.
func (c *Conn) drain(write bool) {
	for {
		of, ok := c.out.takeOrClose()
		if !ok {
			return
		}
		if write {
			c.wmu.Lock()
			write = c.w.WriteFrame(of.frame) == nil
			c.wmu.Unlock()
		}
		c.owner.Written(of.frame.Len())
		finish(of.done)
		c.queued.Add(-1)
	}
}

// outQueue is a Conn's queue of frames for its writer: at most outBuffer
// of them, in order. Its room is taken only while frames wait, so an idle
// Conn holds none of it (a channel of outBuffer frames was most of an
// idle stream session's memory). Safe for concurrent use by producers and
// one writer.
type outQueue struct {
	mu     sync.Mutex
	frames []outFrame
	head   int           // frames[head:] wait
	closed bool          // the writer has stopped: nothing more is queued
	ready  chan struct{} // capacity 1: a frame was queued since the writer looked
	room   chan struct{} // capacity 1: a frame was taken since a producer found the queue full
}

func newOutQueue() outQueue {
	return outQueue{ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// outFrame is a queued frame and what to call once it is written or given
// up (nil: nothing).
type outFrame struct {
	frame jsonrpc.Frame
	done  func()
}

// tryPut queues f, with its done, unless outBuffer frames wait already or
// the queue is closed.
func (q *outQueue) tryPut(f jsonrpc.Frame, done func()) bool {
	q.mu.Lock()
	n := len(q.frames) - q.head
	if n >= outBuffer || q.closed {
		q.mu.Unlock()
		return false
	}
	if q.head > 0 && len(q.frames) == cap(q.frames) {
		copy(q.frames, q.frames[q.head:]) // reuse the room taken frames left
		clear(q.frames[n:])
		q.frames, q.head = q.frames[:n], 0
	}
	q.frames = append(q.frames, outFrame{f, done})
	more := n+1 < outBuffer
	q.mu.Unlock()
	signal(q.ready)
	if more {
		signal(q.room) // another producer waiting for room may go on too
	}
	return true
}

// take returns the oldest waiting frame, if any.
func (q *outQueue) take() (outFrame, bool) { return q.takeFrame(false) }

// takeOrClose is take, closing the queue when nothing waits: no frame
// queued before it is left behind.
func (q *outQueue) takeOrClose() (outFrame, bool) { return q.takeFrame(true) }

func (q *outQueue) takeFrame(closeEmpty bool) (outFrame, bool) {
	q.mu.Lock()
	if q.head == len(q.frames) {
		q.closed = q.closed || closeEmpty
		q.mu.Unlock()
		return outFrame{}, false
	}
	f := q.frames[q.head]
	q.frames[q.head] = outFrame{}
	q.head++
	if q.head == len(q.frames) {
		q.head = 0
		q.frames = q.frames[:0]
		if cap(q.frames) > 16 {
			q.frames = nil // a burst's room goes back
		}
	}
	q.mu.Unlock()
	signal(q.room)
	return f, true
}

// signal sends on a channel of capacity 1 without waiting.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
