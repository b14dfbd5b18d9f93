package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// nested is a JSON value n arrays deep.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestUnreadableAnswerEndsItsCall: an answer the engine refuses to parse
// (too deep, not JSON) still ends the call its top-level id names, at
// once and with the reason, and the connection stays up.
func TestUnreadableAnswerEndsItsCall(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		answer func(id string) string
		reason string
	}{
		{"nested 200000 deep", func(id string) string {
			return `{"jsonrpc":"2.0","id":` + id + `,"result":` + nested(200000) + `}`
		}, "nested deeper than 10000"},
		{"nested 200000 deep, id last", func(id string) string {
			return `{"jsonrpc":"2.0","result":{"content":` + nested(200000) + `},"id":` + id + `}`
		}, "nested deeper than 10000"},
		{"syntax error", func(id string) string {
			return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[}}`
		}, "invalid character"},
		{"cut short", func(id string) string {
			return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[`
		}, "unexpected end"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, p := newPair(t, 1<<20, Options{})
			ch := call(c, context.Background(), "tools/call", `{"name":"x"}`)
			id := string(p.next()["id"])
			p.write(tc.answer(id))
			r := wait(t, ch)
			var ue *UnreadableError
			if !errors.As(r.err, &ue) || !errors.Is(r.err, ErrUnreadable) || !strings.Contains(r.err.Error(), "viewmux cannot read") ||
				!strings.Contains(r.err.Error(), tc.reason) {
				t.Fatalf("call ended with %v, want an unreadable answer saying %q", r.err, tc.reason)
			}
			next := call(c, context.Background(), "ping", "")
			p.write(`{"jsonrpc":"2.0","id":` + string(p.next()["id"]) + `,"result":{}}`)
			if r := wait(t, next); r.err != nil {
				t.Fatalf("the next call: %v", r.err)
			}
		})
	}
}

// TestUnreadableRequestAnswered: a request from the upstream that does
// not parse is answered with a parse error under its id, not left
// waiting; one whose id is itself broken is dropped.
func TestUnreadableRequestAnswered(t *testing.T) {
	t.Parallel()
	_, p := newPair(t, 1<<20, Options{
		OnRequest: func(context.Context, string, string, json.RawMessage) (json.RawMessage, error) {
			t.Error("the hook saw a request that does not parse")
			return nil, nil
		},
	})
	p.write(`{"jsonrpc":"2.0","id":12x,"method":"roots/list","params":` + nested(20000) + `}`)
	p.write(`{"jsonrpc":"2.0","id":"s-9","method":"sampling/createMessage","params":` + nested(20000) + `}`)
	m := p.next()
	var e Error
	if string(m["id"]) != `"s-9"` || json.Unmarshal(m["error"], &e) != nil || e.Code != CodeParseError || !strings.Contains(e.Message, "nested deeper") {
		t.Fatalf("answer = %v", m)
	}
}

// TestOutcomeUnknownOnlyAfterSend: a call whose request was written when
// the connection ended fails with ErrOutcomeUnknown; one made on a
// connection already gone, or whose write provably sent nothing, fails
// with ErrClosed alone.
func TestOutcomeUnknownOnlyAfterSend(t *testing.T) {
	t.Parallel()
	t.Run("lost after the write", func(t *testing.T) {
		t.Parallel()
		c, p := newPair(t, 1<<20, Options{})
		ch := call(c, context.Background(), "tools/call", `{}`)
		p.next()
		p.out.Close() // the upstream goes away without answering
		r := wait(t, ch)
		if !errors.Is(r.err, ErrOutcomeUnknown) || !errors.Is(r.err, ErrClosed) {
			t.Fatalf("err = %v, want ErrOutcomeUnknown and ErrClosed", r.err)
		}
		<-c.Done()
		if _, err := c.Call(context.Background(), "tools/call", nil); !errors.Is(err, ErrClosed) || errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("a call on the closed connection: %v, want ErrClosed alone", err)
		}
	})
	t.Run("connection watched by the caller", func(t *testing.T) {
		t.Parallel()
		c, p := newPair(t, 1<<20, Options{})
		ctx, lose := context.WithCancelCause(context.Background())
		ch := call(c, ctx, "tools/call", `{}`)
		p.next()
		lose(fmt.Errorf("%w: the child exited", ErrClosed))
		if r := wait(t, ch); !errors.Is(r.err, ErrOutcomeUnknown) || !strings.Contains(r.err.Error(), "the child exited") {
			t.Fatalf("err = %v, want ErrOutcomeUnknown with the cause", r.err)
		}
	})
	t.Run("write that sent nothing", func(t *testing.T) {
		t.Parallel()
		toConnR, toConnW := io.Pipe()
		toPeerR, toPeerW := io.Pipe()
		toPeerR.Close() // every write fails before its first byte
		c := New(NewLines(toConnR, toPeerW, toPeerW, 1<<20), Options{Name: "test", Limit: 1 << 20})
		c.Start()
		t.Cleanup(func() {
			c.Close()
			toConnW.Close()
			c.Wait()
		})
		if _, err := c.Call(context.Background(), "tools/call", nil); !errors.Is(err, ErrClosed) || errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("err = %v, want ErrClosed alone", err)
		}
	})
}
