package upstream

import (
	"context"
	"log/slog"

	"github.com/mark3labs/mcp-go/mcp"
)

// libraryLogger returns the logger handed to mcp-go's transports: log, with
// the library's chatter lowered to Debug (SPEC §9). mcp-go logs routine
// events at Info ("listening to server forever") and some at Error (a
// server that offers no GET stream, a roots/list mcpmux refused); mcpmux
// logs what matters about those itself.
func libraryLogger(log *slog.Logger) *slog.Logger {
	return slog.New(&demoteHandler{next: log.Handler()})
}

// demoteHandler passes records to next, lowering to Debug every record
// below Warn and the Errors routineError names.
type demoteHandler struct{ next slog.Handler }

var _ slog.Handler = (*demoteHandler)(nil)

// Enabled cannot know the message yet: a record is checked again, at its
// final level, in Handle.
func (h *demoteHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *demoteHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn || routineError(r) {
		if !h.next.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r = r.Clone()
		r.Level = slog.LevelDebug
	}
	return h.next.Handle(ctx, r)
}

func (h *demoteHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &demoteHandler{next: h.next.WithAttrs(as)}
}

func (h *demoteHandler) WithGroup(name string) slog.Handler {
	return &demoteHandler{next: h.next.WithGroup(name)}
}

// routineError reports whether r is an mcp-go Error about something
// routine: a server without the standalone GET stream (allowed by the
// spec), or a roots/list request that was refused (the refusal is answered
// to the upstream, which carries on without roots).
func routineError(r slog.Record) bool {
	switch r.Message {
	case "server does not support listening":
		return true
	case "error handling request":
		routine := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "method" && a.Value.String() == string(mcp.MethodListRoots) {
				routine = true
				return false
			}
			return true
		})
		return routine
	}
	return false
}
