package sessions

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"
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
// When in ends, ServeStdio answers what it already received (waiting at
// most server.shutdown_grace), then returns nil. When ctx is done it
// cancels what is in flight and returns nil as well. An error that is not
// EOF reading in is returned. A reader blocked on in when ctx ends is left
// behind unless in supports SetReadDeadline (a pipe on stdin usually does
// not); it ends with the process.
//
// It is meant to be called once per process, with in and out that nothing
// else uses.
func (s *Server) ServeStdio(ctx context.Context, profile string, in io.Reader, out io.Writer) error {
	b, err := s.Resolver().ResolveLocal(Selection{Profile: profile})
	if err != nil {
		return fmt.Errorf("stdio: %w", err)
	}
	ss := s.newStreamSession(ctx, "stdio", b, &lineWriter{w: out})
	if err := s.streams.add(ss); err != nil {
		ss.close(err)
		return nil
	}
	read := make(chan error, 1)
	go func() { read <- s.readLines(ss, in) }()

	grace := s.cfg.Server.ShutdownGrace
	var readErr error
	readerDone := false
	select {
	case readErr = <-read:
		readerDone = true
		// The client closed stdin: finish what it asked for, then stop.
		ictx, cancel := context.WithTimeout(ctx, grace)
		ss.idle(ictx)
		cancel()
		ss.end(errClientGone)
	case <-ss.done():
	}
	wctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := ss.wait(wctx); err != nil {
		s.log.Warn("stdio session did not stop within server.shutdown_grace", "session", ss.id, "duration", grace)
	}
	if !readerDone {
		if d, ok := in.(interface{ SetReadDeadline(time.Time) error }); ok && d.SetReadDeadline(time.Now()) == nil {
			select {
			case <-read:
			case <-wctx.Done():
			}
		}
	}
	if readErr != nil && !errors.Is(readErr, io.EOF) {
		return fmt.Errorf("stdio: reading stdin: %w", readErr)
	}
	return nil
}

// readLines reads the client's lines into the session until in ends or the
// session does.
func (s *Server) readLines(ss *streamSession, in io.Reader) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("panic reading stdin", "session", ss.id, "panic", v)
			err = fmt.Errorf("reader panic: %v", v)
		}
	}()
	br := bufio.NewReaderSize(in, stdinBuffer)
	for {
		line, id, over, err := readLine(br, s.cfg.Server.MaxBodyBytes)
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
		if !ss.receive(line) {
			return nil
		}
	}
}

// lineWriter writes one message per line. A JSON encoding never contains a
// raw newline, so the newline is an unambiguous delimiter.
type lineWriter struct{ w io.Writer }

func (lw *lineWriter) writeFrame(frame []byte) error {
	// One Write per message: the line reaches the pipe whole.
	_, err := lw.w.Write(append(frame[:len(frame):len(frame)], '\n'))
	return err
}
