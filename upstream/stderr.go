package upstream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/viewmux/viewmux/internal/redact"
	"github.com/viewmux/viewmux/internal/termsafe"
)

const (
	// stderrTailLines is how many of a child's last stderr lines are kept
	// for the error of a failed connection attempt.
	stderrTailLines = 10
	// maxTailLine bounds one kept line; longer ones are cut.
	maxTailLine = 512
	// maxJSONDepth bounds the nesting of a JSON stderr line turned into
	// log attributes; deeper values are kept as decoded Go values.
	maxJSONDepth = 16
	// exitGrace is how long a failed attempt waits to see its child exit
	// before it takes the stderr lines as they are.
	exitGrace = 200 * time.Millisecond
)

// StderrError is the error of a stdio connection attempt, together with the
// last lines the child wrote to stderr before it failed: usually the reason a
// child that dies at start gives. Err names the upstream.
type StderrError struct {
	Err error
	// Stderr holds at most the last ten lines, oldest first, each cut to
	// 512 bytes and with its control characters escaped
	// (termsafe.Escape). Never empty.
	Stderr []string
}

// Error is Err's text followed by the stderr lines, one per line, each
// indented and marked "stderr|".
func (e *StderrError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	for _, l := range e.Stderr {
		b.WriteString("\n  stderr| ")
		b.WriteString(l)
	}
	return b.String()
}

func (e *StderrError) Unwrap() error { return e.Err }

// withStderr returns err with lines attached, or err itself when there
// are none.
func withStderr(err error, lines []string) error {
	if err == nil || len(lines) == 0 {
		return err
	}
	return &StderrError{Err: err, Stderr: lines}
}

// stderrTail keeps the last stderrTailLines lines a child wrote to stderr.
// Its zero value is ready; it is safe for concurrent use.
type stderrTail struct {
	mu    sync.Mutex
	lines []string // a ring once full
	next  int      // where the next line goes once full
}

func (t *stderrTail) add(line string) {
	if len(line) > maxTailLine {
		line = line[:maxTailLine] + "…"
	}
	// The lines end up in errors that check and serve print on a
	// terminal: a child's escape sequences are shown, not run.
	line = termsafe.Escape(line)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) < stderrTailLines {
		t.lines = append(t.lines, line)
		return
	}
	t.lines[t.next] = line
	t.next = (t.next + 1) % stderrTailLines
}

// snapshot returns the kept lines, oldest first, in a new slice.
func (t *stderrTail) snapshot() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.lines))
	out = append(out, t.lines[t.next:]...)
	return append(out, t.lines[:t.next]...)
}

// lastStderr returns the child's last stderr lines for the error of a
// failed attempt. A child that exited gets a moment for its last lines to
// be read; one still running (a hung child) is not waited for.
func (p *process) lastStderr() []string {
	if waitClosed(p.exited, exitGrace) {
		waitClosed(p.stderrDone, stderrDrainWait)
	}
	return p.tail.snapshot()
}

// logStderr logs each line of r at Info with message "stderr" and keeps
// the last ones in tail. A line that is a JSON object is logged with its
// fields as attributes under the group "stderr" (so a log shipper sees a
// pino or zap line as fields, not as a quoted string); any other line is
// the string attribute "stderr". Lines longer than maxStderrLine are logged
// truncated and the rest is skipped. Every value secrets holds (the
// upstream's env values, which a child may echo) is masked in the kept
// lines and in what is logged.
func logStderr(r io.Reader, log *slog.Logger, tail *stderrTail, secrets *redact.Secrets) {
	if secrets != nil {
		log = slog.New(secrets.Handler(log.Handler()))
	}
	br := bufio.NewReaderSize(r, maxStderrLine)
	for {
		line, err := br.ReadSlice('\n')
		truncated := errors.Is(err, bufio.ErrBufferFull)
		if len(line) > 0 {
			raw := bytes.TrimRight(line, "\r\n")
			text := string(raw)
			tail.add(secrets.Mask(text))
			switch attrs, ok := jsonAttrs(raw); {
			case truncated:
				log.Info("stderr", "stderr", text, "truncated", true)
			case ok:
				log.Info("stderr", slog.Attr{Key: "stderr", Value: slog.GroupValue(attrs...)})
			default:
				log.Info("stderr", "stderr", text)
			}
		}
		for truncated { // skip the rest of an overlong line
			_, err = br.ReadSlice('\n')
			truncated = errors.Is(err, bufio.ErrBufferFull)
		}
		if err != nil {
			return
		}
	}
}

// jsonAttrs decodes line as one JSON object into attributes, in the
// object's order: objects become groups, numbers int64 or float64, arrays
// and null their decoded Go values. ok is false when line is anything but
// a single JSON object with at least one field.
func jsonAttrs(line []byte) (attrs []slog.Attr, ok bool) {
	line = bytes.TrimSpace(line)
	if len(line) < 2 || line[0] != '{' || !json.Valid(line) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return nil, false
	}
	attrs, err := objectAttrs(dec, 0)
	if err != nil || len(attrs) == 0 {
		return nil, false
	}
	return attrs, true
}

// objectAttrs reads an object's fields after its '{', through its '}'.
func objectAttrs(dec *json.Decoder, depth int) ([]slog.Attr, error) {
	var attrs []slog.Attr
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		a, err := valueAttr(dec, key, depth)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, a)
	}
	_, err := dec.Token() // '}'
	return attrs, err
}

// valueAttr reads the next value as the attribute key.
func valueAttr(dec *json.Decoder, key string, depth int) (slog.Attr, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return slog.Attr{}, err
	}
	inner := json.NewDecoder(bytes.NewReader(raw))
	inner.UseNumber()
	if depth < maxJSONDepth && raw[0] == '{' {
		if _, err := inner.Token(); err != nil { // '{'
			return slog.Attr{}, err
		}
		attrs, err := objectAttrs(inner, depth+1)
		if err != nil {
			return slog.Attr{}, err
		}
		return slog.Attr{Key: key, Value: slog.GroupValue(attrs...)}, nil
	}
	var v any
	if err := inner.Decode(&v); err != nil {
		return slog.Attr{}, err
	}
	return plainAttr(key, v), nil
}

// plainAttr is a decoded JSON value that is not an object.
func plainAttr(key string, v any) slog.Attr {
	switch x := v.(type) {
	case string:
		return slog.String(key, x)
	case bool:
		return slog.Bool(key, x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return slog.Int64(key, i)
		}
		if f, err := x.Float64(); err == nil {
			return slog.Float64(key, f)
		}
		return slog.String(key, x.String())
	}
	return slog.Any(key, v)
}
