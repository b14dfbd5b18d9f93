package sessions

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mcpmux/mcpmux/internal/jsonrpc"
	"github.com/mcpmux/mcpmux/sessions/door"
	"github.com/mcpmux/mcpmux/sessions/grant"
)

// The stdio front door: `mcpmux serve --stdio` serves the one client that
// launched it, one JSON-RPC message per line on stdin and stdout (MCP's
// stdio transport). The profile comes from --profile; there is no token.

// stdinBuffer is the read buffer of the stdio reader; lines may be longer
// (up to server.max_body_bytes).
const stdinBuffer = 64 << 10

// ServeStdio serves one client reading messages from in and writing
// answers and notifications to out, one per line, bound to the view of
// profile ("" = server.default_profile), resolved without a token as
// `mcpmux tools` resolves it. A line over server.max_body_bytes is answered
// with a JSON-RPC error and reading goes on.
//
// When in ends, or ctx is done, ServeStdio answers every request it has
// read (SPEC §8): each gets server.shutdown_grace to finish with its
// result; the calls still running then are cancelled upstream and
// answered with a JSON-RPC error, as is every call read after ctx was
// done. Then it returns nil. An error that is not EOF reading in is
// returned. When a config reload removes the session's profile, the
// session ends at once (its calls are cancelled, unanswered) and
// ServeStdio returns an error naming the profile. A reader blocked on in when ctx ends is left behind unless in
// supports SetReadDeadline (a pipe on stdin usually does not); it ends
// with the process.
//
// It is meant to be called once per process, with in and out that nothing
// else uses.
func (s *Server) ServeStdio(ctx context.Context, profile string, in io.Reader, out io.Writer) error {
	b, err := s.Resolver().ResolveLocal(grant.Selection{Profile: profile})
	if err != nil {
		return fmt.Errorf("stdio: %w", err)
	}
	// The session outlives ctx, so that what was read is still answered.
	ss := s.newStreamSession(context.WithoutCancel(ctx), "stdio", b, &lineWriter{w: out})
	if err := s.admit(ss); err != nil {
		ss.Close(err)
		return nil
	}
	defer s.flights.forget(ss.ID())
	gate := &stdinGate{}
	read := make(chan error, 1)
	go func() { read <- s.readLines(ss, in, gate) }()

	var readErr error
	readerDone := false
	select {
	case readErr = <-read:
		readerDone = true
		// The client closed stdin: finish what it asked for, then stop.
		s.finishStdio(ss, errClientGone)
	case <-ctx.Done():
		// mcpmux is stopping: requests read from now on are refused, and
		// no new call of this client starts.
		gate.close()
		s.flights.close(ss.ID())
		s.finishStdio(ss, errServerShutdown)
	case <-ss.Done():
	}
	wctx, cancel := context.WithTimeout(context.Background(), answerWait)
	defer cancel()
	if err := ss.Wait(wctx); err != nil {
		s.log.Warn("stdio session did not write its last answers in time", "session", ss.ID(), "duration", answerWait)
	}
	if !readerDone {
		if d, ok := in.(interface{ SetReadDeadline(time.Time) error }); ok && d.SetReadDeadline(time.Now()) == nil {
			select {
			case <-read:
			case <-wctx.Done():
			}
		}
	}
	if cause := ss.Cause(); errors.Is(cause, errConfigChanged) {
		// The client is told by the end of stdout; the user, by this.
		return fmt.Errorf("stdio: session ended: %w", cause)
	}
	if readErr != nil && !errors.Is(readErr, io.EOF) {
		return fmt.Errorf("stdio: reading stdin: %w", readErr)
	}
	return nil
}

// finishStdio ends ss once the requests it has taken are answered: they
// get server.shutdown_grace to finish; then its calls still running are
// cancelled and answered with shutdownError, and its new calls refused,
// before it ends with cause. Nothing may hand ss new requests meanwhile.
func (s *Server) finishStdio(ss *streamSession, cause error) {
	grace := s.cfg.Server.ShutdownGrace
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	ss.idle(gctx)
	late := gctx.Err() != nil
	cancel()
	if late {
		s.flights.close(ss.ID())
		n := s.flights.abort(ss.ID())
		s.log.Info("calls still running at the end of server.shutdown_grace are answered with an error", "session", ss.ID(), "calls", n, "duration", grace)
		actx, acancel := context.WithTimeout(context.Background(), answerWait)
		ss.idle(actx)
		acancel()
	}
	ss.End(cause)
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
// session does. A request that gate refuses is answered shutdownError.
func (s *Server) readLines(ss *streamSession, in io.Reader, gate *stdinGate) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("panic reading stdin", "session", ss.ID(), "panic", v)
			err = fmt.Errorf("reader panic: %v", v)
		}
	}()
	br := bufio.NewReaderSize(in, stdinBuffer)
	for {
		line, id, over, err := door.ReadLine(br, s.cfg.Server.MaxBodyBytes)
		if err != nil {
			return err
		}
		if over {
			ss.send(ss.ctx, s.oversizeAnswer(ss, id))
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		handed, ok := gate.pass(line, ss.Receive)
		if !handed {
			m, _ := jsonrpc.Parse(line)
			ss.send(ss.ctx, jsonrpc.ErrorResponse(m.ID, shutdownError()))
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
