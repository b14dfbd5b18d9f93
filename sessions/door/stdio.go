package door

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// The stdio front door: `viewmux serve --stdio` serves the one client that
// launched it, one JSON-RPC message per line on stdin and stdout (MCP's
// stdio transport). The profile comes from --profile; there is no token.

// stdinBuffer is the read buffer of the stdio reader; lines may be longer
// (up to server.max_body_bytes).
const stdinBuffer = 64 << 10

// Local is the session of the one client that launched viewmux, as the
// stdio door sees it.
type Local interface {
	Stream
	// Refusal is the answer to a request the door read after it stopped
	// handing requests to the session (the server is shutting down).
	Refusal(id json.RawMessage) []byte
	// Stop makes the session's new calls fail from now on, as the
	// server's shutdown does.
	Stop()
	// Finish ends the session with cause once the requests it has taken
	// are answered: they get server.shutdown_grace to finish; then its
	// calls still running are cancelled and answered with an error, and
	// its new calls refused. Nothing may hand it new requests meanwhile.
	Finish(cause error)
	// Release forgets what the host kept for the session once it is over
	// (what Stop marked).
	Release()
}

// ServeStdio serves one client reading messages from in and writing
// answers and notifications to out, one per line, bound to the view of
// profile ("" = server.default_profile), resolved without a token as
// `viewmux tools` resolves it. A line over server.max_body_bytes is answered
// with a JSON-RPC error and reading goes on.
//
// When in ends, or ctx is done, ServeStdio answers every request it has
// read, so that stopping drops no call: each gets server.shutdown_grace to
// finish with its result; the calls still running then are cancelled
// upstream and answered with a JSON-RPC error, as is every call read after
// ctx was done. Then it returns nil. An error that is not EOF reading in is
// returned. When a config reload removes the session's profile, the
// session ends at once (its calls are cancelled, unanswered) and
// ServeStdio returns an error naming the profile. A reader blocked on in when ctx ends is left behind unless in
// supports SetReadDeadline (a pipe on stdin usually does not); it ends
// with the process.
//
// It is meant to be called once per process, with in and out that nothing
// else uses.
func (d *Doors) ServeStdio(ctx context.Context, profile string, in io.Reader, out io.Writer) error {
	l, err := d.cfg.Host.Local(ctx, profile, &lineWriter{w: out})
	if err != nil {
		return fmt.Errorf("stdio: %w", err)
	}
	if l == nil { // not admitted: the server is shutting down
		return nil
	}
	defer l.Release()
	gate := &stdinGate{}
	read := make(chan error, 1)
	go func() { read <- d.readLines(l, in, gate) }()

	var readErr error
	readerDone := false
	select {
	case readErr = <-read:
		readerDone = true
		// The client closed stdin: finish what it asked for, then stop.
		l.Finish(ErrClientGone)
	case <-ctx.Done():
		// viewmux is stopping: requests read from now on are refused, and
		// no new call of this client starts.
		gate.close()
		l.Stop()
		l.Finish(ErrServerShutdown)
	case <-l.Done():
	}
	wctx, cancel := context.WithTimeout(context.Background(), d.cfg.AnswerWait)
	defer cancel()
	if err := l.Wait(wctx); err != nil {
		d.log.Warn("stdio session did not write its last answers in time", "session", l.ID(), "duration", d.cfg.AnswerWait)
	}
	if !readerDone {
		if rd, ok := in.(interface{ SetReadDeadline(time.Time) error }); ok && rd.SetReadDeadline(time.Now()) == nil {
			select {
			case <-read:
			case <-wctx.Done():
			}
		}
	}
	if cause := l.Cause(); d.cfg.Revoked != nil && errors.Is(cause, d.cfg.Revoked) {
		// The client is told by the end of stdout; the user, by this.
		return fmt.Errorf("stdio: session ended: %w", cause)
	}
	if readErr != nil && !errors.Is(readErr, io.EOF) {
		return fmt.Errorf("stdio: reading stdin: %w", readErr)
	}
	return nil
}

// stdinGate stops the stdin reader from handing requests to the session:
// once closed, it answers each request it reads with shutdownError itself.
// Its zero value is open; it is safe for concurrent use.
type stdinGate struct {
	mu     sync.Mutex
	closed bool
}

// pass hands raw to receive and returns its result as ok, unless the gate
// is closed and raw is a request: then handed is false. Once close has
// returned, no request passes.
func (g *stdinGate) pass(raw []byte, receive func([]byte) bool) (handed, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		if m, err := jsonrpc.Parse(raw); err == nil && m.IsRequest() {
			return false, true
		}
	}
	return true, receive(raw)
}

func (g *stdinGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
}

// readLines reads the client's lines into the session until in ends or the
// session does. A request that gate refuses is answered with the session's
// Refusal.
func (d *Doors) readLines(l Local, in io.Reader, gate *stdinGate) (err error) {
	defer func() {
		if v := recover(); v != nil {
			d.log.Error("panic reading stdin", "session", l.ID(), "panic", v)
			err = fmt.Errorf("reader panic: %v", v)
		}
	}()
	br := bufio.NewReaderSize(in, stdinBuffer)
	for {
		line, id, over, err := ReadLine(br, d.cfg.MaxMessageBytes)
		if err != nil {
			return err
		}
		if over {
			l.Send(l.Oversize(id))
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		handed, ok := gate.pass(line, l.Receive)
		if !handed {
			m, _ := jsonrpc.Parse(line)
			l.Send(l.Refusal(m.ID))
			continue
		}
		if !ok {
			return nil
		}
	}
}

// lineWriter writes one message per line. A message may hold line breaks
// between its tokens (an upstream's pretty-printed result): they become
// spaces (jsonrpc.OneLine), so that the newline stays an unambiguous
// delimiter and no upstream can start a line of its own on the client's
// stream.
type lineWriter struct{ w io.Writer }

var newline = []byte("\n")

func (lw *lineWriter) WriteFrame(frame jsonrpc.Frame) error {
	frame = frame.OneLine().Joined()
	if len(frame[1]) == 0 && len(frame[2]) == 0 {
		// One Write per message: the line reaches the pipe whole.
		f := frame[0]
		_, err := lw.w.Write(append(f[:len(f):len(f)], '\n'))
		return err
	}
	// An answer around a large result: its pieces one after the other
	// (the session's one writer is the only one on this pipe).
	if _, err := frame.WriteTo(lw.w); err != nil {
		return err
	}
	_, err := lw.w.Write(newline)
	return err
}
