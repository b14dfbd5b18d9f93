package wire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// Lines is the stdio framing: one message per line, each at most Limit
// bytes (the newline, and a carriage return before it, not counted).
// Empty lines are skipped.
type Lines struct {
	r     *bufio.Reader
	w     io.Writer
	c     io.Closer
	limit int64
}

// NewLines returns a Transport reading messages from r and writing them to
// w; Close closes c (a child's stdin), after which reads end once the
// peer closes r.
func NewLines(r io.Reader, w io.Writer, c io.Closer, limit int64) *Lines {
	return &Lines{r: bufio.NewReaderSize(r, 64<<10), w: w, c: c, limit: limit}
}

// ReadFrame implements Transport.
func (l *Lines) ReadFrame() (Frame, error) {
	var msg []byte
	for {
		chunk, err := l.r.ReadSlice('\n')
		end := err == nil
		body := chunk
		if end {
			body = chunk[:len(chunk)-1]
		}
		if int64(len(msg))+int64(len(body)) > l.limit+1 || (end && int64(len(msg))+int64(len(bytes.TrimSuffix(body, []byte("\r")))) > l.limit) {
			return l.skipLine(msg, body, end, err)
		}
		msg = append(msg, body...)
		switch {
		case end:
			msg = bytes.TrimSuffix(msg, []byte("\r"))
			if len(bytes.TrimSpace(msg)) == 0 {
				msg = msg[:0]
				continue
			}
			return Frame{Data: msg}, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return Frame{}, err
		}
	}
}

// skipLine reads the rest of a line over the limit, keeping only its id.
func (l *Lines) skipLine(head, body []byte, end bool, err error) (Frame, error) {
	var s jsonrpc.IDScanner
	s.Feed(head)
	s.Feed(body)
	for !end {
		if !errors.Is(err, bufio.ErrBufferFull) {
			return Frame{}, err
		}
		var chunk []byte
		chunk, err = l.r.ReadSlice('\n')
		end = err == nil
		if end {
			chunk = chunk[:len(chunk)-1]
		}
		s.Feed(chunk)
	}
	id, method := s.End()
	return Frame{Oversize: true, ID: id, Method: method}, nil
}

// WriteFrame implements Transport: msg on one line (jsonrpc.OneLine: a
// line break between its tokens would end it early, and what follows would
// be read as another message), and a newline, in one write when msg has
// room for it. A write that failed before its first byte says ErrNotSent.
func (l *Lines) WriteFrame(_ context.Context, msg []byte) error {
	n, err := l.w.Write(append(jsonrpc.OneLine(msg), '\n'))
	if err != nil && n == 0 {
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return err
}

// Close implements Transport.
func (l *Lines) Close() error { return l.c.Close() }

// ReadMessage reads one whole message from r (a message-framed transport's
// reader of one frame, such as a websocket message) up to limit bytes. A
// longer one is read to its end without being kept, and returned as an
// oversize Frame carrying its id.
func ReadMessage(r io.Reader, limit int64) (Frame, error) {
	msg, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return Frame{}, err
	}
	if int64(len(msg)) <= limit {
		return Frame{Data: msg}, nil
	}
	var s jsonrpc.IDScanner
	s.Feed(msg)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		s.Feed(buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Frame{}, err
		}
	}
	id, method := s.End()
	return Frame{Oversize: true, ID: id, Method: method}, nil
}
