package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Tool names on the upstream. echoTool is read-only and is what the latency
// and throughput phases call; writeTool is not read-only, so the "ro"
// profile hides it and every call to it through viewmux must be denied;
// notifyTool sends "count" progress notifications before its result, when
// the call carries a progress token.
const (
	echoTool   = "echo"
	writeTool  = "write"
	notifyTool = "notify"
)

// upstreamTools is how many tools the upstream has besides the fillers.
const upstreamTools = 4

// upstream is an mcp-go streamable HTTP MCP server on a loopback port,
// in this process. Its HTTP handler counts every request, and every
// tools/call by tool name, before mcp-go sees it.
type upstream struct {
	url  string
	srv  *http.Server
	done chan error

	requests atomic.Int64 // HTTP requests of any kind
	conns    atomic.Int64 // TCP connections accepted
	echoSSE  atomic.Int64 // tools/call echo answered as an event stream
	blobSSE  atomic.Int64 // tools/call blob answered as an event stream

	mu       sync.Mutex
	calls    map[string]int64 // tools/call by params.name
	answered map[string]int64 // … whose handler has returned
}

// startUpstream serves echo, write and extra filler tools on 127.0.0.1:0.
func startUpstream(extra int) (*upstream, error) {
	s := server.NewMCPServer("load-upstream", "1.0.0", server.WithToolCapabilities(false))
	tools := []server.ServerTool{
		{
			Tool: mcp.NewTool(echoTool,
				mcp.WithDescription("Returns its text argument."),
				mcp.WithString("text", mcp.Required(), mcp.Description("text to echo")),
				mcp.WithReadOnlyHintAnnotation(true),
			),
			Handler: func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText(req.GetString("text", "")), nil
			},
		},
		{
			Tool: mcp.NewTool(writeTool,
				mcp.WithDescription("Pretends to write something. Hidden by a read-only profile."),
				mcp.WithString("text", mcp.Required(), mcp.Description("what to write")),
				mcp.WithReadOnlyHintAnnotation(false),
				mcp.WithDestructiveHintAnnotation(true),
			),
			Handler: func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("written"), nil
			},
		},
		{
			Tool: mcp.NewTool(notifyTool,
				mcp.WithDescription("Sends count progress notifications, then returns."),
				mcp.WithNumber("count", mcp.Required(), mcp.Description("how many notifications")),
				mcp.WithReadOnlyHintAnnotation(true),
			),
			Handler: notify,
		},
		{
			Tool: mcp.NewTool(blobTool,
				mcp.WithDescription("Returns a text result of exactly bytes bytes."),
				mcp.WithNumber("bytes", mcp.Required(), mcp.Description("result size")),
				mcp.WithReadOnlyHintAnnotation(true),
			),
			Handler: func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				n := req.GetInt("bytes", 0)
				if n < 0 || n > maxBlobBytes {
					return mcp.NewToolResultError(fmt.Sprintf("bytes must be 0 to %d", maxBlobBytes)), nil
				}
				return mcp.NewToolResultText(blobText(n)), nil
			},
		},
	}
	for i := range extra {
		tools = append(tools, server.ServerTool{
			Tool: mcp.NewTool(fmt.Sprintf("tool_%04d", i),
				mcp.WithDescription(fmt.Sprintf("Filler tool %d: does a small, well-described thing to its input.", i)),
				mcp.WithString("query", mcp.Required(), mcp.Description("what to look for")),
				mcp.WithNumber("limit", mcp.Description("how many results")),
				mcp.WithReadOnlyHintAnnotation(i%2 == 0),
			),
			Handler: func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			},
		})
	}
	s.AddTools(tools...)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("upstream listen: %w", err)
	}
	u := &upstream{
		url:      "http://" + ln.Addr().String() + "/mcp",
		done:     make(chan error, 1),
		calls:    make(map[string]int64),
		answered: make(map[string]int64),
	}
	h := server.NewStreamableHTTPServer(s)
	mux := http.NewServeMux()
	mux.Handle("/mcp", u.count(h))
	mux.HandleFunc("GET /counts", u.serveCounts)
	u.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				u.conns.Add(1)
			}
		},
	}
	go func() { u.done <- u.srv.Serve(ln) }()
	return u, nil
}

// notify serves notifyTool: it queues its notifications with mcp-go, which
// writes them on the call's response stream ahead of the result.
func notify(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	n := req.GetInt("count", 0)
	var token mcp.ProgressToken
	if req.Params.Meta != nil {
		token = req.Params.Meta.ProgressToken
	}
	srv := server.ServerFromContext(ctx)
	if token == nil || srv == nil {
		return mcp.NewToolResultText(notifiedText(0)), nil
	}
	for i := 1; i <= n; i++ {
		err := srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), map[string]any{
			"progressToken": token,
			"progress":      i,
			"total":         n,
		})
		if err != nil {
			return mcp.NewToolResultError(fmt.Sprintf("progress %d/%d: %v", i, n, err)), nil
		}
	}
	return mcp.NewToolResultText(notifiedText(n)), nil
}

func notifiedText(n int) string { return fmt.Sprintf("sent %d notifications", n) }

// count wraps h: it counts the request and, for a POST, reads the body to
// count tools/call by name, then hands h an identical body. The extra work
// is the same for direct calls and calls relayed by viewmux.
//
// It also counts the echo calls h answered as an event stream instead of
// one JSON body: mcp-go's server switches a session to SSE for good once
// it has sent that session a notification, and the client then drops the
// connection under a stream it stops reading after the result. The blob
// calls answered as an event stream are counted too: each series checks
// that it measured the upstream state it names (see upState). Every call
// is counted again once the handler has returned (settledCounts).
func (u *upstream) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		var name string
		if r.Method == http.MethodPost && r.Body != nil {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if n, ok := toolCallName(body); ok {
				name = n
				u.mu.Lock()
				u.calls[name]++
				u.mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
		if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			switch name {
			case echoTool:
				u.echoSSE.Add(1)
			case blobTool:
				u.blobSSE.Add(1)
			}
		}
		if name != "" {
			u.mu.Lock()
			u.answered[name]++
			u.mu.Unlock()
		}
	})
}

// toolCallName reports params.name when body is one tools/call request.
// Anything else (batches, notifications, responses) is not a call.
func toolCallName(body []byte) (string, bool) {
	if !bytes.Contains(body, []byte(`"tools/call"`)) {
		return "", false
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Method != "tools/call" {
		return "", false
	}
	return msg.Params.Name, true
}

// counts is what the upstream's HTTP handler has seen so far.
type counts struct {
	Requests int64            `json:"requests"` // HTTP requests to /mcp
	Conns    int64            `json:"conns"`    // TCP connections accepted
	EchoSSE  int64            `json:"echo_sse"` // tools/call echo answered as SSE
	BlobSSE  int64            `json:"blob_sse"` // tools/call blob answered as SSE
	Calls    map[string]int64 `json:"calls"`    // tools/call by tool name
	Answered map[string]int64 `json:"answered"` // … answered (counted once the handler returned)
}

func (u *upstream) snapshot() counts {
	u.mu.Lock()
	defer u.mu.Unlock()
	return counts{Requests: u.requests.Load(), Conns: u.conns.Load(), EchoSSE: u.echoSSE.Load(), BlobSSE: u.blobSSE.Load(), Calls: maps.Clone(u.calls), Answered: maps.Clone(u.answered)}
}

func (u *upstream) serveCounts(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(u.snapshot())
}

func (u *upstream) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := u.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = u.srv.Close() // viewmux may hold a long-lived GET stream
	}
	if serr := <-u.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}
