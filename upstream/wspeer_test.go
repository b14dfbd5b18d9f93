package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/configs"
)

// wsPeer is a test-only websocket MCP server: it accepts connections (with
// the subprotocols in Subprotocols) and bridges their text frames into an
// mcp-go server through HandleMessage, with one ClientSession per
// connection. It serves on a real loopback listener and records what it saw
// on the wire. Close ends every connection and waits for its goroutines.
type wsPeer struct {
	srv          *server.MCPServer
	subprotocols []string // offered by Accept; nil selects none

	mu          sync.Mutex
	sessions    map[*wsPeerSession]struct{}
	headers     []http.Header   // handshake request headers, in order
	closeCodes  []int           // close statuses received from the client
	cancels     []mcp.RequestId // requestIds of notifications/cancelled received
	closed      bool
	wg          sync.WaitGroup
	nextSession atomic.Int64
}

// newWSPeer returns a peer serving srv with subprotocol "mcp".
func newWSPeer(srv *server.MCPServer) *wsPeer {
	return &wsPeer{srv: srv, subprotocols: []string{wsSubprotocol}, sessions: map[*wsPeerSession]struct{}{}}
}

// serve serves p on ln until cleanup, which stops the listener and then
// closes every connection.
func (p *wsPeer) serve(t *testing.T, ln net.Listener) *http.Server {
	hs := &http.Server{Handler: p}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(ln)
	}()
	t.Cleanup(func() {
		hs.Close()
		<-done
		p.Close()
	})
	return hs
}

// listen serves p on a new loopback listener and returns its ws:// URL.
func (p *wsPeer) listen(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.serve(t, ln)
	return "ws://" + ln.Addr().String() + "/mcp"
}

// Close drops every connection abruptly (as if the server process died:
// the kernel closes its sockets) and waits for their goroutines.
func (p *wsPeer) Close() {
	p.mu.Lock()
	p.closed = true
	sessions := slices.Collect(maps.Keys(p.sessions))
	p.mu.Unlock()
	for _, s := range sessions {
		s.cancel()
		s.ws.CloseNow()
	}
	p.wg.Wait()
}

func (p *wsPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		http.Error(w, "closed", http.StatusServiceUnavailable)
		return
	}
	p.headers = append(p.headers, r.Header.Clone())
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()

	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: p.subprotocols})
	if err != nil {
		return
	}
	ws.SetReadLimit(-1)
	ctx, cancel := context.WithCancel(context.Background())
	s := &wsPeerSession{
		id:      fmt.Sprintf("ws-%d", p.nextSession.Add(1)),
		ws:      ws,
		ctx:     ctx,
		cancel:  cancel,
		notes:   make(chan mcp.JSONRPCNotification, 100),
		pending: map[string]chan json.RawMessage{},
	}
	p.mu.Lock()
	p.sessions[s] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.sessions, s)
		p.mu.Unlock()
	}()
	if err := p.srv.RegisterSession(ctx, s); err != nil {
		ws.Close(websocket.StatusInternalError, err.Error())
		cancel()
		return
	}
	defer p.srv.UnregisterSession(ctx, s.id)
	ctx = p.srv.WithContext(ctx, s)

	var handlers sync.WaitGroup
	defer func() {
		cancel()
		handlers.Wait()
		ws.CloseNow()
	}()
	handlers.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case n := <-s.notes:
				s.send(n)
			}
		}
	})
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			if code := websocket.CloseStatus(err); code != -1 {
				p.mu.Lock()
				p.closeCodes = append(p.closeCodes, int(code))
				p.mu.Unlock()
			}
			return
		}
		if typ != websocket.MessageText {
			ws.Close(websocket.StatusUnsupportedData, "text frames only")
			return
		}
		var head struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(data, &head) != nil {
			continue
		}
		var params struct {
			Name      string        `json:"name"`
			RequestID mcp.RequestId `json:"requestId"`
		}
		json.Unmarshal(head.Params, &params) // only read for tools/call and notifications/cancelled
		hasID := len(head.ID) > 0 && string(head.ID) != "null"
		switch {
		case head.Method == "" && hasID: // a response to one of our requests
			s.deliver(string(head.ID), data)
		case hasID:
			handlers.Go(func() {
				if resp := p.srv.HandleMessage(ctx, data); resp != nil {
					s.send(resp)
				}
			})
			if head.Method == string(mcp.MethodToolsCall) && params.Name == "freeze" {
				// Stop reading, so pings go unanswered, until the peer closes.
				<-ctx.Done()
				return
			}
		default:
			if head.Method == string(mcp.MethodNotificationCancelled) {
				p.mu.Lock()
				p.cancels = append(p.cancels, params.RequestID)
				p.mu.Unlock()
			}
			p.srv.HandleMessage(ctx, data)
		}
	}
}

// snapshot returns copies of what the peer recorded.
func (p *wsPeer) snapshot() (headers []http.Header, closeCodes []int, cancels []mcp.RequestId) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.headers), slices.Clone(p.closeCodes), slices.Clone(p.cancels)
}

// wsPeerSession is one websocket connection's mcp-go ClientSession.
type wsPeerSession struct {
	id     string
	ws     *websocket.Conn
	ctx    context.Context // ends with the connection
	cancel context.CancelFunc
	notes  chan mcp.JSONRPCNotification

	initialized atomic.Bool
	nextID      atomic.Int64
	mu          sync.Mutex
	pending     map[string]chan json.RawMessage
}

func (s *wsPeerSession) SessionID() string                                   { return s.id }
func (s *wsPeerSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return s.notes }
func (s *wsPeerSession) Initialize()                                         { s.initialized.Store(true) }
func (s *wsPeerSession) Initialized() bool                                   { return s.initialized.Load() }

// send writes v as one text frame.
func (s *wsPeerSession) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	s.ws.Write(s.ctx, websocket.MessageText, b) // a failure ends the connection; the reader sees it
}

// request sends a server→client request and returns its raw response.
func (s *wsPeerSession) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	id := s.nextID.Add(1)
	key := fmt.Sprintf(`"srv-%d"`, id)
	ch := make(chan json.RawMessage, 1)
	s.mu.Lock()
	s.pending[key] = ch
	s.mu.Unlock()
	s.send(map[string]any{"jsonrpc": "2.0", "id": fmt.Sprintf("srv-%d", id), "method": method, "params": params})
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *wsPeerSession) deliver(id string, data []byte) {
	s.mu.Lock()
	ch := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if ch != nil {
		ch <- data
	}
}

// peerSession returns the websocket session of a tool handler's ctx.
func peerSession(ctx context.Context) (*wsPeerSession, error) {
	s, ok := server.ClientSessionFromContext(ctx).(*wsPeerSession)
	if !ok {
		return nil, errors.New("not a websocket session")
	}
	return s, nil
}

// newWSTestServer is newTestServer plus tools that only a websocket peer can
// offer: binary (sends a binary frame), roots (asks the client for its roots
// and returns the raw response), freeze (the peer stops reading).
func newWSTestServer() *server.MCPServer {
	s := newTestServer()
	s.AddTool(mcp.NewTool("binary"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		sess, err := peerSession(ctx)
		if err != nil {
			return nil, err
		}
		if err := sess.ws.Write(sess.ctx, websocket.MessageBinary, []byte{0xff, 0x00, 0x01}); err != nil {
			return nil, err
		}
		<-ctx.Done() // the client closes the connection
		return nil, ctx.Err()
	})
	s.AddTool(mcp.NewTool("roots"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		sess, err := peerSession(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := sess.request(ctx, string(mcp.MethodListRoots), map[string]any{})
		if err != nil {
			return nil, err
		}
		return mcp.NewToolResultText(string(resp)), nil
	})
	s.AddTool(mcp.NewTool("freeze"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	return s
}

// wsConfig is an upstream config for the websocket endpoint url.
func wsConfig(name, url string) *configs.Upstream {
	return &configs.Upstream{
		Name:            name,
		Transport:       configs.TransportWebsocket,
		URL:             url,
		Headers:         map[string]string{"X-Test-Header": "from-config"},
		ConnectTimeout:  10 * time.Second,
		CallTimeout:     30 * time.Second,
		MaxMessageBytes: 16 << 20,
	}
}

// wsPeerConfig serves a fresh newTestServer over websocket.
func wsPeerConfig(t *testing.T, name string) *configs.Upstream {
	return wsConfig(name, newWSPeer(newTestServer()).listen(t))
}

// hasLog reports whether logs hold a record of upstream name whose message
// contains msg and whose err contains errPart.
func hasLog(logs *logSink, name, msg, errPart string) bool {
	return len(logs.find(func(r map[string]string) bool {
		return r["upstream"] == name && strings.Contains(r["msg"], msg) && strings.Contains(r["err"], errPart)
	})) > 0
}
