package upstream

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// A child that fails at start (a missing script, a bad flag) fails the
// same way on every retry, and its stderr (a 14-line Node stack, say) would
// be logged again each time. stderrRepeats keeps that output once: the
// first failure's lines are logged at info as they arrive, and the lines of
// a retried child that repeat, in order, those of the child before it are
// logged at debug, until one differs; from there on its lines are logged
// at info again. The retry's "connect failed" warning then carries a
// one-line note instead of the same lines (supervise). Health keeps the
// whole text either way.

// maxRepeatLines bounds the lines of one child remembered for comparison.
const maxRepeatLines = 256

// stderrRepeats is an Upstream's memory of the stderr of its last child
// that failed to start. Its zero value is ready. Only the supervisor
// goroutine calls its methods; each child's handler holds its own state.
type stderrRepeats struct {
	prev    []string     // lines of the last child that failed at start; nil = none
	prevErr []string     // the StderrError lines of that failure, for the warning
	cur     *childStderr // the child of the attempt in progress, if any
}

// child returns the handler the stderr of a new child is logged through,
// over next, and makes that child the current one.
func (r *stderrRepeats) child(next slog.Handler) slog.Handler {
	r.cur = &childStderr{prev: r.prev}
	return &repeatHandler{next: next, c: r.cur}
}

// failed records that the current child failed to start: the next child's
// lines are compared with its lines.
func (r *stderrRepeats) failed() {
	if r.cur != nil {
		r.prev = r.cur.snapshot()
		r.cur = nil
	}
}

// succeeded records that the current connection attempt succeeded: a
// later failure is logged in full.
func (r *stderrRepeats) succeeded() {
	r.prev, r.prevErr, r.cur = nil, nil, nil
}

// repeated reports whether lines, the stderr of a failed attempt's error,
// are those of the failure before it, and remembers them.
func (r *stderrRepeats) repeated(lines []string) bool {
	same := len(lines) > 0 && slices.Equal(lines, r.prevErr)
	r.prevErr = lines
	return same
}

// childStderr is what one child wrote to stderr, compared as it arrives
// with what the child before it wrote. It is safe for concurrent use.
type childStderr struct {
	prev []string // read-only

	mu       sync.Mutex
	lines    []string
	n        int  // lines seen
	diverged bool // a line differed from prev, or prev ran out
}

// see records line and reports whether it repeats the previous child's.
func (c *childStderr) see(line string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lines) < maxRepeatLines {
		c.lines = append(c.lines, line)
	}
	same := !c.diverged && c.n < len(c.prev) && c.prev[c.n] == line
	c.n++
	if !same {
		c.diverged = true
	}
	return same
}

func (c *childStderr) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines)
}

// repeatHandler demotes to debug the "stderr" records (logStderr) whose
// line repeats the previous failed child's; every other record passes.
type repeatHandler struct {
	next slog.Handler
	c    *childStderr
}

func (h *repeatHandler) Enabled(ctx context.Context, l slog.Level) bool {
	// A line may be demoted only after it is seen: let stderr lines through
	// to Handle even when only debug would drop them.
	return h.next.Enabled(ctx, l) || l == slog.LevelInfo
}

func (h *repeatHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "stderr" && rec.Level == slog.LevelInfo {
		var line string
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "stderr" {
				line = a.Value.Resolve().String()
				return false
			}
			return true
		})
		if h.c.see(line) {
			rec.Level = slog.LevelDebug
		}
	}
	if !h.next.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.next.Handle(ctx, rec)
}

func (h *repeatHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &repeatHandler{next: h.next.WithAttrs(as), c: h.c}
}

func (h *repeatHandler) WithGroup(name string) slog.Handler {
	return &repeatHandler{next: h.next.WithGroup(name), c: h.c}
}
