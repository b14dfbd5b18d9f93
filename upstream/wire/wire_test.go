package wire

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// peer is the upstream end of a Lines transport: the test reads what the
// Conn wrote and writes what the upstream says.
type peer struct {
	t    *testing.T
	in   *bufio.Reader  // what the Conn wrote
	out  *io.PipeWriter // to the Conn
	sent chan map[string]json.RawMessage
}

func newPair(t *testing.T, limit int64, opts Options) (*Conn, *peer) {
	t.Helper()
	toConnR, toConnW := io.Pipe()
	toPeerR, toPeerW := io.Pipe()
	opts.Name = "test"
	opts.Limit = limit
	c := New(NewLines(toConnR, toPeerW, toPeerW, limit), opts)
	c.Start()
	p := &peer{t: t, in: bufio.NewReader(toPeerR), out: toConnW, sent: make(chan map[string]json.RawMessage, 64)}
	go func() {
		for {
			line, err := p.in.ReadBytes('\n')
			if err != nil {
				close(p.sent)
				return
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				t.Errorf("the conn wrote a line that is not JSON: %q", line)
				continue
			}
			p.sent <- m
		}
	}()
	t.Cleanup(func() {
		c.Close()
		toConnW.Close()
		c.Wait()
	})
	return c, p
}

func (p *peer) write(s string) {
	p.t.Helper()
	if _, err := io.WriteString(p.out, s+"\n"); err != nil {
		p.t.Fatalf("peer write: %v", err)
	}
}

func (p *peer) next() map[string]json.RawMessage {
	p.t.Helper()
	select {
	case m, ok := <-p.sent:
		if !ok {
			p.t.Fatal("the conn's output ended")
		}
		return m
	case <-time.After(10 * time.Second):
		p.t.Fatal("nothing written by the conn")
	}
	return nil
}

type result struct {
	res json.RawMessage
	err error
}

func call(c *Conn, ctx context.Context, method string, params string) chan result {
	ch := make(chan result, 1)
	go func() {
		var p json.RawMessage
		if params != "" {
			p = json.RawMessage(params)
		}
		res, err := c.Call(ctx, method, p)
		ch <- result{res, err}
	}()
	return ch
}

func wait(t *testing.T, ch chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("call did not return")
	}
	return result{}
}

func TestCallResultBytes(t *testing.T) {
	c, p := newPair(t, 1<<20, Options{})
	ch := call(c, context.Background(), "tools/call", `{"name":"x"}`)
	req := p.next()
	if string(req["method"]) != `"tools/call"` || string(req["params"]) != `{"name":"x"}` {
		t.Fatalf("request = %v", req)
	}
	p.write(`{"jsonrpc":"2.0","id":` + string(req["id"]) + `,"result":{"n":12345678901234567890, "z" : 1}}`)
	r := wait(t, ch)
	if r.err != nil || string(r.res) != `{"n":12345678901234567890, "z" : 1}` {
		t.Fatalf("result = %s, %v", r.res, r.err)
	}
}

func TestErrorKeptExactly(t *testing.T) {
	c, p := newPair(t, 1<<20, Options{})
	ch := call(c, context.Background(), "tools/call", `{}`)
	req := p.next()
	p.write(`{"jsonrpc":"2.0","id":` + string(req["id"]) + `,"error":{"code":-32042,"message":"nope","data":{"big":9007199254740993}}}`)
	r := wait(t, ch)
	var e *Error
	if !errors.As(r.err, &e) || e.Code != -32042 || e.Message != "nope" || string(e.Data) != `{"big":9007199254740993}` {
		t.Fatalf("err = %#v", r.err)
	}
}

func TestOversizeFailsOnlyItsCall(t *testing.T) {
	const limit = 1024
	c, p := newPair(t, limit, Options{})
	big := call(c, context.Background(), "tools/call", `{"name":"big"}`)
	bigID := p.next()["id"]
	small := call(c, context.Background(), "tools/call", `{"name":"small"}`)
	smallID := p.next()["id"]

	p.write(`{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 200*limit) + `"}]},"id":` + string(bigID) + `}`)
	r := wait(t, big)
	if !errors.Is(r.err, ErrTooLarge) || !strings.Contains(r.err.Error(), "1024 bytes") {
		t.Fatalf("big call: %v, want ErrTooLarge naming the limit", r.err)
	}
	p.write(`{"jsonrpc":"2.0","id":` + string(smallID) + `,"result":{"ok":true}}`)
	if r := wait(t, small); r.err != nil || string(r.res) != `{"ok":true}` {
		t.Fatalf("small call: %s, %v", r.res, r.err)
	}
	select {
	case <-c.Done():
		t.Fatalf("connection ended: %v", c.Err())
	default:
	}
}

// TestDroppedMessages: an oversize message with no id, a line that is not
// JSON, and an answer to an id nobody waits for are dropped; the
// connection stays up and the next call is answered.
func TestDroppedMessages(t *testing.T) {
	c, p := newPair(t, 256, Options{})
	p.write(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + strings.Repeat("y", 4096) + `"}}`)
	p.write(`{"jsonrpc":"2.0","result":{"data":"` + strings.Repeat("y", 4096) + `"}}`)
	p.write(`this is not json`)
	p.write(`[1,2,3]`)
	p.write(``)
	p.write(`{"jsonrpc":"2.0","id":"viewmux-999","result":{}}`)
	p.write(`{"jsonrpc":"2.0","id":17,"result":{}}`)
	ch := call(c, context.Background(), "ping", "")
	req := p.next()
	p.write(`{"jsonrpc":"2.0","id":` + string(req["id"]) + `,"result":{}}`)
	if r := wait(t, ch); r.err != nil {
		t.Fatalf("call after dropped messages: %v", r.err)
	}
}

func TestServerRequests(t *testing.T) {
	got := make(chan string, 4)
	c, p := newPair(t, 1<<20, Options{
		OnRequest: func(ctx context.Context, _, method string, params json.RawMessage) (json.RawMessage, error) {
			got <- method + " " + string(params)
			if method == "roots/list" {
				return nil, &Error{Code: -32042, Message: "refused", Data: json.RawMessage(`{"why":1}`)}
			}
			return json.RawMessage(`{"role":"assistant"}`), nil
		},
	})
	_ = c
	p.write(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if m := p.next(); string(m["id"]) != "7" || string(m["result"]) != "{}" {
		t.Fatalf("ping answer = %v", m)
	}
	p.write(`{"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{"maxTokens":5}}`)
	if m := p.next(); string(m["id"]) != `"s-1"` || string(m["result"]) != `{"role":"assistant"}` {
		t.Fatalf("sampling answer = %v", m)
	}
	if g := <-got; g != `sampling/createMessage {"maxTokens":5}` {
		t.Fatalf("hook got %q", g)
	}
	p.write(`{"jsonrpc":"2.0","id":8.0,"method":"roots/list"}`)
	m := p.next()
	var e Error
	if string(m["id"]) != "8.0" || json.Unmarshal(m["error"], &e) != nil || e.Code != -32042 || string(e.Data) != `{"why":1}` {
		t.Fatalf("roots answer = %v", m)
	}
}

func TestNoRequestHook(t *testing.T) {
	_, p := newPair(t, 1<<20, Options{})
	p.write(`{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{}}`)
	m := p.next()
	var e Error
	if json.Unmarshal(m["error"], &e) != nil || e.Code != CodeMethodNotFound {
		t.Fatalf("answer = %v", m)
	}
}

func TestNotifications(t *testing.T) {
	got := make(chan string, 4)
	_, p := newPair(t, 1<<20, Options{
		OnNotification: func(_, method string, params json.RawMessage) { got <- method + " " + string(params) },
	})
	p.write(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`)
	p.write(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	for _, want := range []string{`notifications/progress {"progressToken":"t","progress":1}`, `notifications/tools/list_changed `} {
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("got %q, want %q", g, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("notification not delivered")
		}
	}
}

func TestCancellationUsesOwnID(t *testing.T) {
	c, p := newPair(t, 1<<20, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ch := call(c, ctx, "tools/call", `{"id":"the client's"}`)
	req := p.next()
	cancel()
	if r := wait(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err = %v", r.err)
	}
	n := p.next()
	var params struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if string(n["method"]) != `"notifications/cancelled"` || json.Unmarshal(n["params"], &params) != nil || string(params.RequestID) != string(req["id"]) {
		t.Fatalf("cancel notice = %v, want requestId %s", n, req["id"])
	}
	if !strings.HasPrefix(string(req["id"]), `"viewmux-`) {
		t.Fatalf("id %s is not one viewmux minted", req["id"])
	}
}

func TestIDsNeverReused(t *testing.T) {
	c, p := newPair(t, 1<<20, Options{})
	seen := map[string]bool{}
	for range 5 {
		ch := call(c, context.Background(), "ping", "")
		id := string(p.next()["id"])
		if seen[id] {
			t.Fatalf("id %s reused", id)
		}
		seen[id] = true
		p.write(`{"jsonrpc":"2.0","id":` + id + `,"result":{}}`)
		wait(t, ch)
	}
}

func TestCloseFailsPending(t *testing.T) {
	c, p := newPair(t, 1<<20, Options{})
	ch := call(c, context.Background(), "tools/call", `{}`)
	p.next()
	c.Close()
	if r := wait(t, ch); !errors.Is(r.err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", r.err)
	}
	if _, err := c.Call(context.Background(), "ping", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after close: %v", err)
	}
}

func TestLostReportsAndFails(t *testing.T) {
	lost := make(chan error, 1)
	c, p := newPair(t, 1<<20, Options{OnLost: func(err error) { lost <- err }})
	ch := call(c, context.Background(), "tools/call", `{}`)
	p.next()
	p.out.Close() // the upstream's output ends
	if r := wait(t, ch); !errors.Is(r.err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", r.err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("lost with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnLost not called")
	}
}

func TestReadMessage(t *testing.T) {
	f, err := ReadMessage(strings.NewReader(`{"id":"a","result":1}`), 100)
	if err != nil || f.Oversize || string(f.Data) != `{"id":"a","result":1}` {
		t.Fatalf("small: %+v, %v", f, err)
	}
	f, err = ReadMessage(strings.NewReader(`{"result":"`+strings.Repeat("z", 100000)+`","id":"b"}`), 100)
	if err != nil || !f.Oversize || string(f.ID) != `"b"` || f.Data != nil {
		t.Fatalf("large: %+v, %v", f.ID, err)
	}
}

// TestDispatchTied: a frame a transport hands over from a call's own
// response stream reaches the hooks with that call's id; the reader's own
// frames arrive untied.
func TestDispatchTied(t *testing.T) {
	got := make(chan string, 4)
	c, p := newPair(t, 1<<20, Options{
		OnNotification: func(tied, method string, _ json.RawMessage) { got <- tied + " " + method },
		OnRequest: func(_ context.Context, tied, method string, _ json.RawMessage) (json.RawMessage, error) {
			got <- tied + " " + method
			return json.RawMessage(`{}`), nil
		},
	})
	c.Dispatch(Frame{Data: []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`)}, "viewmux-3")
	c.Dispatch(Frame{Data: []byte(`{"jsonrpc":"2.0","id":1,"method":"roots/list"}`)}, "viewmux-4")
	p.write(`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`)
	want := map[string]bool{"viewmux-3 notifications/progress": true, "viewmux-4 roots/list": true, " notifications/message": true}
	for range want {
		select {
		case g := <-got:
			if !want[g] {
				t.Errorf("unexpected %q", g)
			}
			delete(want, g)
		case <-time.After(10 * time.Second):
			t.Fatalf("missing %v", want)
		}
	}
	if m := p.next(); string(m["id"]) != "1" {
		t.Fatalf("answer to the tied request = %v", m)
	}
}

// TestOversizeRequestAnswered: a request from the upstream over the limit
// is answered with an error rather than left waiting.
func TestOversizeRequestAnswered(t *testing.T) {
	_, p := newPair(t, 256, Options{
		OnRequest: func(context.Context, string, string, json.RawMessage) (json.RawMessage, error) {
			t.Error("the hook saw an oversize request")
			return nil, nil
		},
	})
	p.write(`{"jsonrpc":"2.0","id":"big-1","method":"sampling/createMessage","params":{"x":"` + strings.Repeat("q", 4096) + `"}}`)
	m := p.next()
	var e Error
	if string(m["id"]) != `"big-1"` || json.Unmarshal(m["error"], &e) != nil || e.Code != CodeInvalidRequest || !strings.Contains(e.Message, "256 bytes") {
		t.Fatalf("answer = %v", m)
	}
}

// ctxTransport hands on the ctx of each WriteFrame.
type ctxTransport struct {
	Transport
	got chan context.Context
}

func (t ctxTransport) WriteFrame(ctx context.Context, msg []byte) error {
	select {
	case t.got <- ctx:
	default:
	}
	return t.Transport.WriteFrame(ctx, msg)
}

type reqKey struct{}

// TestWriteFrameContext: a transport's WriteFrame gets a ctx with the
// values of the request the message belongs to (its trace context, for a
// transport that sends headers), which ends with the connection, not with
// the request, and whose cause is the connection's.
func TestWriteFrameContext(t *testing.T) {
	toConnR, toConnW := io.Pipe()
	toPeerR, toPeerW := io.Pipe()
	go io.Copy(io.Discard, toPeerR)
	tr := ctxTransport{Transport: NewLines(toConnR, toPeerW, toPeerW, 1<<20), got: make(chan context.Context, 4)}
	c := New(tr, Options{Name: "test", Limit: 1 << 20})
	c.Start()
	t.Cleanup(func() {
		c.Close()
		toConnW.Close()
		c.Wait()
	})

	next := func() context.Context {
		t.Helper()
		select {
		case got := <-tr.got:
			return got
		case <-time.After(10 * time.Second):
			t.Fatal("nothing written")
		}
		return nil
	}
	reqCtx, cancel := context.WithCancel(context.WithValue(context.Background(), reqKey{}, "request"))
	call(c, reqCtx, "tools/call", `{}`)
	got := next()
	if v, _ := got.Value(reqKey{}).(string); v != "request" {
		t.Errorf("WriteFrame's ctx lacks the request's value: %v", got.Value(reqKey{}))
	}
	cancel()
	if got.Err() != nil {
		t.Errorf("WriteFrame's ctx ended with the request: %v", got.Err())
	}

	// A request that is still going when the connection ends: the
	// frame's ctx reports the connection's end, cause included.
	live, stop := context.WithCancel(context.WithValue(context.Background(), reqKey{}, "second"))
	defer stop()
	call(c, live, "tools/call", `{}`)
	got = next()
	c.Close()
	select {
	case <-got.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("WriteFrame's ctx did not end with the connection")
	}
	if context.Cause(got) == nil || got.Err() == nil {
		t.Errorf("ended WriteFrame ctx: Err %v, Cause %v; want both set", got.Err(), context.Cause(got))
	}
}
