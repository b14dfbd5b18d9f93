// Package typedrec is a typed MCP upstream for viewmux's adversarial tests:
// an mcp-go server whose tools use mcp-go's typed handlers
// (mcp.NewTypedToolHandler, which binds params.arguments into a Go struct
// with encoding/json) and, instead of acting, record what they would have
// acted on. What a Go upstream executes is the value its decoder produced,
// not the bytes on the wire; these records are that value, so a test can
// prove that what viewmux checked is what the upstream would run.
//
// The server does not validate arguments against its input schemas, as
// mcp-go does not by default: a missing or mistyped argument is bound as
// the zero value and still "executed", which is what a careless upstream
// does.
package typedrec

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Exec is one run of a typed tool handler: what it would have executed.
type Exec struct {
	Tool string `json:"tool"` // the tool's own (upstream) name
	// Value is the tool's one argument as the typed handler bound it into
	// its struct (encoding/json: case-insensitive keys, the last of two
	// equal keys wins). It is what the tool acts on.
	Value string `json:"value"`
	// Get is the same argument read with CallToolRequest.GetString (exact
	// key, from mcp-go's map of the arguments).
	Get string `json:"get"`
	// Raw is params.arguments as mcp-go received them.
	Raw string `json:"raw"`
	// Barrier is the string at params._meta.barrier, "" when absent: the
	// tests mark their barrier calls with it.
	Barrier string `json:"barrier"`
}

// Tools are the tools New registers, by name, each with its one string
// argument. shell_run stands for a tool that hands its argument to a
// shell, read_file for one that opens a path, open_link for one that
// fetches a URL (its argument has a "k", which Go's decoder folds together
// with the Kelvin sign U+212A); secret_tool is one a profile hides.
var Tools = map[string]string{
	"shell_run":   "command",
	"read_file":   "path",
	"open_link":   "link",
	"secret_tool": "command",
}

// The argument structs of the tools, as a Go upstream declares them.
type (
	shellArgs struct {
		Command string `json:"command"`
	}
	fileArgs struct {
		Path string `json:"path"`
	}
	linkArgs struct {
		Link string `json:"link"`
	}
)

// New returns the typed upstream named name. record is called once per
// tool run, before the tool answers; it must be safe for concurrent use.
func New(name string, record func(Exec)) *server.MCPServer {
	s := server.NewMCPServer(name, "1.0.0", server.WithToolCapabilities(false))
	add := func(tool, arg string, h server.ToolHandlerFunc) {
		s.AddTool(mcp.NewTool(tool,
			mcp.WithDescription("records what it would do with its "+arg),
			mcp.WithString(arg, mcp.Required(), mcp.Description("what the tool acts on")),
		), h)
	}
	run := func(tool, arg, value string, req mcp.CallToolRequest) *mcp.CallToolResult {
		e := Exec{Tool: tool, Value: value, Get: req.GetString(arg, ""), Raw: string(req.Params.RawArguments)}
		if m := req.Params.Meta; m != nil {
			e.Barrier, _ = m.AdditionalFields["barrier"].(string)
		}
		record(e)
		return mcp.NewToolResultText(fmt.Sprintf("%s would act on %q", tool, value))
	}
	add("shell_run", "command", mcp.NewTypedToolHandler(func(_ context.Context, req mcp.CallToolRequest, a shellArgs) (*mcp.CallToolResult, error) {
		return run("shell_run", "command", a.Command, req), nil
	}))
	add("read_file", "path", mcp.NewTypedToolHandler(func(_ context.Context, req mcp.CallToolRequest, a fileArgs) (*mcp.CallToolResult, error) {
		return run("read_file", "path", a.Path, req), nil
	}))
	add("open_link", "link", mcp.NewTypedToolHandler(func(_ context.Context, req mcp.CallToolRequest, a linkArgs) (*mcp.CallToolResult, error) {
		return run("open_link", "link", a.Link, req), nil
	}))
	add("secret_tool", "command", mcp.NewTypedToolHandler(func(_ context.Context, req mcp.CallToolRequest, a shellArgs) (*mcp.CallToolResult, error) {
		return run("secret_tool", "command", a.Command, req), nil
	}))
	return s
}
