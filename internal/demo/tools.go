package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Limits and defaults of slow_count's arguments.
const (
	defaultCount      = 5
	maxCount          = 1000
	defaultIntervalMS = 100
	maxIntervalMS     = 10000
)

// maxAddedTools bounds how many tools add_tool may register, so a runaway
// client cannot grow the tool list without limit.
const maxAddedTools = 256

// listNotesOutput is list_notes' structuredContent.
type listNotesOutput struct {
	Titles []string `json:"titles"`
}

// hints sets all four tool annotations. Every demo tool works only on this
// process's memory, so none is open-world.
func hints(readOnly, destructive, idempotent bool) mcp.ToolOption {
	return func(t *mcp.Tool) {
		t.Annotations.ReadOnlyHint = mcp.ToBoolPtr(readOnly)
		t.Annotations.DestructiveHint = mcp.ToBoolPtr(destructive)
		t.Annotations.IdempotentHint = mcp.ToBoolPtr(idempotent)
		t.Annotations.OpenWorldHint = mcp.ToBoolPtr(false)
	}
}

// withListNotesOutput declares list_notes' outputSchema.
func withListNotesOutput() mcp.ToolOption {
	return func(t *mcp.Tool) {
		t.OutputSchema = mcp.ToolOutputSchema{
			Type: "object",
			Properties: map[string]any{
				"titles": map[string]any{
					"type":        "array",
					"items":       map[string]any{"type": "string"},
					"description": "The notes' titles, sorted.",
				},
			},
			Required:             []string{"titles"},
			AdditionalProperties: false,
		}
	}
}

// addTools registers the built-in tools. It runs before any session exists,
// so the registrations announce nothing.
func (d *demo) addTools() {
	title := mcp.WithString("title", mcp.Required(), mcp.Description("The note's title."))
	d.srv.AddTools(
		server.ServerTool{
			Tool: mcp.NewTool("list_notes",
				mcp.WithDescription("List the titles of all notes, one per line."),
				hints(true, false, true),
				withListNotesOutput(),
			),
			Handler: d.listNotes,
		},
		server.ServerTool{
			Tool: mcp.NewTool("read_note",
				mcp.WithDescription("Return the text of the note with the given title."),
				hints(true, false, true),
				title,
			),
			Handler: d.readNote,
		},
		server.ServerTool{
			Tool: mcp.NewTool("write_note",
				mcp.WithDescription("Create the note with the given title, or replace its text."),
				hints(false, false, true),
				title,
				mcp.WithString("text", mcp.Required(), mcp.Description("The note's new text.")),
			),
			Handler: d.writeNote,
		},
		server.ServerTool{
			Tool: mcp.NewTool("delete_note",
				mcp.WithDescription("Delete the note with the given title."),
				hints(false, true, true),
				title,
			),
			Handler: d.deleteNoteTool,
		},
		server.ServerTool{
			Tool: mcp.NewTool("slow_count",
				mcp.WithDescription("Count from 1 to count, waiting interval_ms between steps and "+
					"sending a progress notification at each step when the request has a progress token. "+
					"Stops when cancelled."),
				hints(true, false, true),
				mcp.WithInteger("count", mcp.Description("How far to count."),
					mcp.DefaultNumber(defaultCount), mcp.Min(1), mcp.Max(maxCount)),
				mcp.WithInteger("interval_ms", mcp.Description("Milliseconds to wait between steps."),
					mcp.DefaultNumber(defaultIntervalMS), mcp.Min(0), mcp.Max(maxIntervalMS)),
			),
			Handler: d.slowCount,
		},
		server.ServerTool{
			Tool: mcp.NewTool("add_tool",
				mcp.WithDescription("Register a new tool at run time that echoes its arguments as JSON; "+
					"clients are told with notifications/tools/list_changed."),
				hints(false, false, false),
				mcp.WithString("name", mcp.Required(), mcp.Pattern(namePattern.String()),
					mcp.Description("The new tool's name.")),
				mcp.WithBoolean("read_only", mcp.DefaultBool(false),
					mcp.Description("The new tool's readOnlyHint.")),
			),
			Handler: d.addTool,
		},
		server.ServerTool{
			Tool: mcp.NewTool("echo",
				mcp.WithDescription("Return text unchanged."),
				hints(true, false, true),
				mcp.WithString("text", mcp.Required(), mcp.Description("The text to return.")),
			),
			Handler: echo,
		},
	)
}

// listNotes serves list_notes.
func (d *demo) listNotes(_ context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	titles, _ := d.snapshot()
	return mcp.NewToolResultStructured(listNotesOutput{Titles: titles}, strings.Join(titles, "\n")), nil
}

// readNote serves read_note.
func (d *demo) readNote(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	title, err := req.RequireString("title")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	text, ok := d.getNote(title)
	if !ok {
		return mcp.NewToolResultErrorf("note %q not found", title), nil
	}
	return mcp.NewToolResultText(text), nil
}

// writeNote serves write_note.
func (d *demo) writeNote(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	title, err := req.RequireString("title")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	text, err := req.RequireString("text")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	if err := checkTitle(title); err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	if d.putNote(title, text) {
		return mcp.NewToolResultText(fmt.Sprintf("created note %q", title)), nil
	}
	return mcp.NewToolResultText(fmt.Sprintf("updated note %q", title)), nil
}

// deleteNoteTool serves delete_note.
func (d *demo) deleteNoteTool(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	title, err := req.RequireString("title")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	if !d.deleteNote(title) {
		return mcp.NewToolResultErrorf("note %q not found", title), nil
	}
	return mcp.NewToolResultText(fmt.Sprintf("deleted note %q", title)), nil
}

// slowCount serves slow_count. It returns ctx.Err() as soon as ctx is done,
// which mcp-go arranges on notifications/cancelled and on shutdown.
func (d *demo) slowCount(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	count, err := intArg(args, "count", defaultCount, 1, maxCount)
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	intervalMS, err := intArg(args, "interval_ms", defaultIntervalMS, 0, maxIntervalMS)
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	var token mcp.ProgressToken
	if req.Params.Meta != nil {
		token = req.Params.Meta.ProgressToken
	}

	interval := time.Duration(intervalMS) * time.Millisecond
	for i := 1; i <= count; i++ {
		if i > 1 {
			sleep(ctx, interval)
		}
		if err := ctx.Err(); err != nil {
			d.log.Info("tool call cancelled", slog.String("tool", "slow_count"), slog.Int("step", i-1))
			return nil, err
		}
		if token == nil {
			continue
		}
		err := d.srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": token,
			"progress":      i,
			"total":         count,
			"message":       fmt.Sprintf("%d/%d", i, count),
		})
		if err != nil {
			// Progress is advisory: a full notification queue drops it.
			d.log.Warn("progress notification not sent", slog.String("tool", "slow_count"), slog.Any("error", err))
		}
	}
	return mcp.NewToolResultText(fmt.Sprintf("counted to %d", count)), nil
}

// sleep waits for d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// intArg returns the integer argument key of args, def when it is absent or
// null, and an error naming key when it is not a whole number in [lo, hi].
func intArg(args map[string]any, key string, def, lo, hi int) (int, error) {
	raw, ok := args[key]
	if !ok || raw == nil {
		return def, nil
	}
	var f float64
	switch v := raw.(type) {
	case float64:
		f = v
	case int:
		f = float64(v)
	case int64:
		f = float64(v)
	case json.Number:
		n, err := v.Float64()
		if err != nil {
			return 0, fmt.Errorf("argument %q must be an integer: %w", key, err)
		}
		f = n
	default:
		return 0, fmt.Errorf("argument %q must be an integer, got %T", key, raw)
	}
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, fmt.Errorf("argument %q must be an integer from %d to %d, got %v", key, lo, hi, raw)
	}
	return int(f), nil
}

// addTool serves add_tool.
func (d *demo) addTool(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := req.RequireString("name")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	if !namePattern.MatchString(name) {
		return mcp.NewToolResultErrorf("tool name %q must match %s", name, namePattern), nil
	}
	readOnly := false
	if raw, ok := req.GetArguments()["read_only"]; ok && raw != nil {
		b, isBool := raw.(bool)
		if !isBool {
			return mcp.NewToolResultErrorf("argument \"read_only\" must be a boolean, got %T", raw), nil
		}
		readOnly = b
	}

	d.addMu.Lock()
	defer d.addMu.Unlock()
	if d.srv.GetTool(name) != nil {
		return mcp.NewToolResultErrorf("tool %q already exists", name), nil
	}
	if d.added >= maxAddedTools {
		return mcp.NewToolResultErrorf("cannot add tool %q: %d tools already added", name, maxAddedTools), nil
	}
	// AddTool sends notifications/tools/list_changed to every session.
	d.srv.AddTool(mcp.NewTool(name,
		mcp.WithDescription("Added at run time by add_tool: returns its arguments as JSON text."),
		hints(readOnly, false, true),
	), echoArguments)
	d.added++
	d.log.Info("tool added", slog.String("tool", name), slog.Bool("read_only", readOnly))
	return mcp.NewToolResultText("added " + name), nil
}

// echoArguments is the handler of every tool add_tool registers: it returns
// the call's arguments as JSON text, byte for byte when the transport kept
// them raw.
func echoArguments(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if raw := req.Params.RawArguments; len(raw) > 0 && string(raw) != "null" {
		return mcp.NewToolResultText(string(raw)), nil
	}
	args := req.GetArguments()
	if args == nil {
		args = map[string]any{}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return mcp.NewToolResultErrorf("cannot encode arguments: %v", err), nil
	}
	return mcp.NewToolResultText(string(b)), nil
}

// echo serves echo.
func echo(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := req.RequireString("text")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return mcp.NewToolResultText(text), nil
}
