// Package demo owns viewmux's built-in demo upstream: a small, real MCP server
// over stdio (`viewmux demo-server --name N`) with an in-memory note store,
// read-only and destructive tools, a slow tool that reports progress and
// honours cancellation, and a tool that registers further tools at run time.
//
// Tests use it as a controllable upstream; the quickstart config mounts it so
// that `viewmux serve` works with nothing else installed.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/server"
)

// workerPoolSize is how many tools/call requests the stdio transport runs at
// once. It must exceed the calls a test or client keeps in flight, or the
// transport falls back to running calls on its read loop, and a
// notifications/cancelled for a running call would then go unread.
const workerPoolSize = 16

// serverVersion is the version the demo server reports in its
// implementation info.
const serverVersion = "0.1.0"

// namePattern is what a server name and an add_tool name must match. A server
// name becomes the authority of the note URIs, so it is kept to characters
// that need no escaping there.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ErrInvalidName is returned (wrapped) by Serve when the server name does not
// match ^[A-Za-z0-9_-]{1,64}$.
var ErrInvalidName = errors.New("invalid demo server name")

// ErrAlreadyServing is returned by Serve when another Serve is running in the
// same process.
var ErrAlreadyServing = errors.New("another demo server is already serving stdio in this process")

// serving is set while a Serve call runs. It is package-level state, which
// viewmux otherwise avoids, because it mirrors package-level state in mcp-go:
// the stdio transport has one process-wide client session (its notification
// channel and writer), so two concurrent Listen calls would steal each other's
// notifications. Refusing the second call is clearer than cross-wiring them.
var serving atomic.Bool

// Serve runs the demo server named name over MCP's stdio framing: it reads
// newline-delimited JSON-RPC from in and writes responses and notifications
// to out. Log lines go to logw only, never to out; a nil logw discards them.
//
// Serve returns nil when in reaches EOF or ctx is cancelled, and otherwise the
// error that stopped it. In-flight calls are cancelled before it returns.
// Serve does not close in or out; a read of in that is blocked when ctx is
// cancelled ends only when in is closed.
//
// A process serving on its own stdout and stderr should first call
// signal.Ignore(syscall.SIGPIPE): mcp-go's stdio client closes the child's
// stderr before waiting for it to exit, and Go kills a process that writes
// to a broken fd 1 or 2 when SIGPIPE is not handled, so the final log line
// would end it with a signal instead of exit status 0.
//
// Only one Serve may run per process (see ErrAlreadyServing): mcp-go's stdio
// session is process-wide. In-process users that need several demo servers at
// once use NewServer with an in-process transport instead.
func Serve(ctx context.Context, name string, in io.Reader, out io.Writer, logw io.Writer) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("demo %q: %w: must match %s", name, ErrInvalidName, namePattern)
	}
	if logw == nil {
		logw = io.Discard
	}
	if !serving.CompareAndSwap(false, true) {
		return fmt.Errorf("demo %q: %w", name, ErrAlreadyServing)
	}
	defer serving.Store(false)

	logger := slog.New(slog.NewTextHandler(logw, nil)).With(slog.String("upstream", name))
	d := newDemo(name, logger)

	stdio := server.NewStdioServer(d.srv)
	stdio.SetErrorLogger(slog.NewLogLogger(logger.Handler(), slog.LevelError))
	server.WithWorkerPoolSize(workerPoolSize)(stdio)

	logger.Info("demo server started")
	err := stdio.Listen(ctx, in, out)
	logger.Info("demo server stopped")
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("demo %q: %w", name, err)
	}
	return nil
}

// NewServer returns a fresh demo server named name, with its own note store
// seeded with the "welcome" note, ready to be served over any mcp-go
// transport. It logs nothing. The returned server is safe for concurrent use
// and owned by the caller.
//
// NewServer panics if name does not match ^[A-Za-z0-9_-]{1,64}$, as
// regexp.MustCompile does for a bad pattern: the name is chosen by the
// program, not read from a peer.
func NewServer(name string) *server.MCPServer {
	if !namePattern.MatchString(name) {
		panic(fmt.Sprintf("demo.NewServer: %q: %v", name, ErrInvalidName))
	}
	return newDemo(name, nil).srv
}
