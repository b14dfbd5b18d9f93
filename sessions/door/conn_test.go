package door

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// testOwner is a session for a Conn under test: Serve answers with the
// request's raw bytes once release is closed (at once when it is nil),
// and it counts held bytes and ends.
type testOwner struct {
	release chan struct{}
	started atomic.Int32
	held    atomic.Int64
	ends    atomic.Int32
	cause   atomic.Value
}

func (o *testOwner) Serve(job *Job) []byte {
	o.started.Add(1)
	if o.release != nil {
		select {
		case <-o.release:
		case <-job.Ctx.Done():
		}
	}
	return job.Raw
}
func (o *testOwner) Hold(n int) bool { o.held.Add(int64(n)); return true }
func (o *testOwner) Written(n int)   { o.held.Add(-int64(n)) }
func (o *testOwner) Ended(cause error) {
	o.ends.Add(1)
	if cause != nil {
		o.cause.Store(cause)
	}
}

// recorder is a FrameWriter that keeps what it wrote; while gate is open
// (not nil and not closed) each write waits for it.
type recorder struct {
	gate    chan struct{}
	waiting atomic.Int32 // writes that waited for gate
	fail    error
	mu      sync.Mutex
	got     []string
}

func (r *recorder) WriteFrame(f jsonrpc.Frame) error {
	if r.gate != nil {
		r.waiting.Add(1)
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.got = append(r.got, string(f.Bytes()))
	return nil
}

func (r *recorder) frames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// TestConnOrder: frames are written in the order they were sent, also
// while the writer is stalled and frames queue behind it, and every byte
// held for the client is given back once written.
func TestConnOrder(t *testing.T) {
	w := &recorder{gate: make(chan struct{})}
	o := &testOwner{}
	c := NewConn(context.Background(), w, o)
	const n = 50
	first := make(chan error, 1)
	go func() { first <- c.Send(context.Background(), []byte("0")) }()
	// The first frame's write is stalled: the rest queue behind it.
	eventually(t, func() bool { return w.waiting.Load() == 1 }, "the first write to start")
	for i := 1; i < n; i++ {
		if err := c.Send(context.Background(), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if q := c.queued.Load(); q != n-1 {
		t.Fatalf("%d frames queued behind a stalled write, want %d", q, n-1)
	}
	close(w.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	c.Close(nil)
	got := w.frames()
	if len(got) != n {
		t.Fatalf("wrote %d frames, want %d", len(got), n)
	}
	for i, f := range got {
		if f != fmt.Sprint(i) {
			t.Fatalf("frame %d is %q", i, f)
		}
	}
	if h := o.held.Load(); h != 0 {
		t.Fatalf("%d bytes still held after every frame was written", h)
	}
	if e := o.ends.Load(); e != 1 {
		t.Fatalf("Ended called %d times", e)
	}
}

// TestConnEnqueue: Workers requests run at once and QueueLen more wait;
// the next is refused with ErrBusy, and once the Conn ended with
// ErrClosed. Requests that finish are answered through the writer; those
// the end cancelled are not.
func TestConnEnqueue(t *testing.T) {
	w := &recorder{}
	o := &testOwner{release: make(chan struct{})}
	c := NewConn(context.Background(), w, o)
	job := func(i int) *Job {
		ctx, cancel := context.WithCancel(c.Context())
		return &Job{Ctx: ctx, Cancel: cancel, Raw: []byte(fmt.Sprint(i))}
	}
	for i := range Workers + QueueLen {
		if err := c.Enqueue(job(i)); err != nil {
			t.Fatalf("request %d refused below the bound: %v", i, err)
		}
		if i == Workers-1 { // the queue is what waits behind running requests
			eventually(t, func() bool { return o.started.Load() == Workers }, "the first requests to run")
		}
	}
	if err := c.Enqueue(job(-1)); !errors.Is(err, ErrBusy) {
		t.Fatalf("request past Workers+QueueLen: %v, want ErrBusy", err)
	}
	close(o.release)
	c.Idle(context.Background())
	eventually(t, func() bool { return len(w.frames()) == Workers+QueueLen }, "every answer to be written")

	o.release = make(chan struct{}) // never released: the end cancels it
	if err := c.Enqueue(job(0)); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("test end")
	c.End(cause)
	c.End(errors.New("second cause"))
	if err := c.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(w.frames()); got != Workers+QueueLen {
		t.Fatalf("a request cancelled by the end was answered (%d answers)", got)
	}
	if err := c.Enqueue(job(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("request after the end: %v, want ErrClosed", err)
	}
	if c.Cause() != cause || o.ends.Load() != 1 {
		t.Fatalf("cause %v, Ended called %d times; want the first cause, once", c.Cause(), o.ends.Load())
	}
}

// TestConnEnds: a write that fails ends the Conn with that error, and the
// end of the parent context ends it with the parent's cause.
func TestConnEnds(t *testing.T) {
	t.Run("write error", func(t *testing.T) {
		broken := errors.New("broken pipe")
		o := &testOwner{}
		c := NewConn(context.Background(), &recorder{fail: broken}, o)
		if err := c.Send(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
			t.Fatalf("Send through a broken writer: %v, want ErrClosed", err)
		}
		c.Wait(context.Background())
		if !errors.Is(c.Cause(), broken) {
			t.Fatalf("cause %v, want the write's error", c.Cause())
		}
		if o.held.Load() != 0 {
			t.Fatalf("%d bytes held after a failed write", o.held.Load())
		}
	})
	t.Run("parent done", func(t *testing.T) {
		gone := errors.New("client gone")
		parent, cancel := context.WithCancelCause(context.Background())
		o := &testOwner{}
		c := NewConn(parent, &recorder{}, o)
		cancel(gone)
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the Conn outlived its parent")
		}
		c.Wait(context.Background())
		eventually(t, func() bool { return o.ends.Load() == 1 }, "Ended to be called") // after the context is done
		if !errors.Is(c.Cause(), gone) {
			t.Fatalf("cause %v, want the parent's", c.Cause())
		}
	})
}

// eventually waits for cond, failing the test with what it waited for
// when it does not hold within a long bound.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestConnOfferHolds: a frame offered without waiting counts in the
// owner's held bytes like any other until it is written, so the count
// neither drifts below zero nor stays up once the frame is out.
func TestConnOfferHolds(t *testing.T) {
	w := &recorder{gate: make(chan struct{})}
	o := &testOwner{}
	c := NewConn(context.Background(), w, o)
	first := make(chan error, 1)
	go func() { first <- c.Send(context.Background(), []byte("first")) }()
	eventually(t, func() bool { return w.waiting.Load() == 1 }, "the first write to start")
	if !c.Offer(jsonrpc.Whole([]byte("offered"))) {
		t.Fatal("an offer to an empty queue was refused")
	}
	if h := o.held.Load(); h != int64(len("first")+len("offered")) {
		t.Fatalf("%d bytes held while two frames wait, want %d", h, len("first")+len("offered"))
	}
	close(w.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	c.Close(nil)
	if got := w.frames(); len(got) != 2 || got[1] != "offered" {
		t.Fatalf("wrote %q", got)
	}
	if h := o.held.Load(); h != 0 {
		t.Fatalf("%d bytes held once every frame was written, want 0", h)
	}
}

// TestConnSendAfterEnd: once the Conn has ended and its writer stopped, a
// frame is refused (ErrClosed for Send, false for Offer), never queued
// where no writer will take it, and holds nothing; frames sent while the
// Conn ends are each either written or refused, and every held byte comes
// back either way.
func TestConnSendAfterEnd(t *testing.T) {
	t.Run("after", func(t *testing.T) {
		w := &recorder{}
		o := &testOwner{}
		c := NewConn(context.Background(), w, o)
		c.Close(nil)
		if err := c.Send(context.Background(), []byte("late")); !errors.Is(err, ErrClosed) {
			t.Fatalf("Send after the Conn ended: %v, want ErrClosed", err)
		}
		if c.Offer(jsonrpc.Whole([]byte("offered"))) {
			t.Fatal("Offer after the Conn ended was accepted")
		}
		if h := o.held.Load(); h != 0 {
			t.Fatalf("%d bytes held after the Conn ended, want 0", h)
		}
		if got := w.frames(); len(got) != 0 {
			t.Fatalf("wrote %q after the end", got)
		}
	})
	t.Run("while ending", func(t *testing.T) {
		for range 200 {
			w := &recorder{}
			o := &testOwner{}
			c := NewConn(context.Background(), w, o)
			const senders = 8
			var accepted atomic.Int32
			var wg sync.WaitGroup
			for i := range senders {
				wg.Go(func() {
					if c.Send(context.Background(), []byte(fmt.Sprint(i))) == nil {
						accepted.Add(1)
					}
				})
			}
			c.End(nil)
			wg.Wait()
			c.Wait(context.Background())
			if got := len(w.frames()); got != int(accepted.Load()) {
				t.Fatalf("%d frames accepted, %d written", accepted.Load(), got)
			}
			if h := o.held.Load(); h != 0 {
				t.Fatalf("%d bytes held once the Conn stopped, want 0", h)
			}
		}
	})
}
