package sessions

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/coder/websocket"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file tests the rule that a reload can only narrow a live
// session or end it, on every door, against real loopback servers: a
// /mcp session (with its GET stream), a legacy SSE stream, a websocket,
// and stdio.

// reloadPeer is one live session of one door, as the reload table drives
// it.
type reloadPeer interface {
	// ask sends a request and returns its answer and the messages that
	// reached the client before it on the session's stream.
	ask(t *testing.T, method string, params any) (rpcMsg, []rpcMsg)
	// listChanged waits for notifications/tools/list_changed.
	listChanged(t *testing.T)
	// ended waits until the door has ended the session and returns what
	// it told the client.
	ended(t *testing.T) string
}

// --- /mcp ---

// mcpPeer is a legacy /mcp session with its GET stream open.
type mcpPeer struct {
	hs    *httptest.Server
	path  string // the URL path and query every request goes to
	auth  string
	sid   string
	next  int
	notes chan sseEvent // the GET stream's events; an event with err at its end
	// refused is the status a request on the ended session may get
	// instead of 404, before its session is looked up: 401 when the
	// reload removed its token or made tokens required, 400 when its
	// path names a toolset that is gone. 0: 404 only.
	refused int
}

func (p *mcpPeer) post(t *testing.T, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.hs.URL+p.path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if p.sid != "" {
		req.Header.Set(mcp.HeaderSessionID, p.sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	if p.auth != "" {
		req.Header.Set("Authorization", p.auth)
	}
	resp, err := p.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// openMCPPeer initializes a session on hs's /mcp with the Authorization
// header auth ("" = none) and opens its GET stream.
func openMCPPeer(t *testing.T, hs *httptest.Server, auth string) *mcpPeer {
	t.Helper()
	return openMCPPeerAt(t, hs, "/mcp", auth)
}

// openMCPPeerAt is openMCPPeer with every request sent to path (a path
// form of PathForms, with a query).
func openMCPPeerAt(t *testing.T, hs *httptest.Server, path, auth string) *mcpPeer {
	t.Helper()
	p := &mcpPeer{hs: hs, path: path, auth: auth, next: 100, notes: make(chan sseEvent, 64)}
	resp := p.post(t, initializeBody)
	resp.Body.Close()
	if p.sid = resp.Header.Get(mcp.HeaderSessionID); resp.StatusCode != http.StatusOK || p.sid == "" {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	p.post(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(mcp.HeaderSessionID, p.sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	get, err := hs.Client().Do(req)
	if err != nil || get.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET /mcp: %v %v", err, get)
	}
	t.Cleanup(func() { cancel(); get.Body.Close() })
	go func() {
		r := &sseEvents{r: bufio.NewReader(get.Body)}
		for {
			name, data, err := r.next()
			p.notes <- sseEvent{name, data, err}
			if err != nil {
				return
			}
		}
	}()
	return p
}

func (p *mcpPeer) ask(t *testing.T, method string, params any) (rpcMsg, []rpcMsg) {
	t.Helper()
	p.next++
	msg := map[string]any{"jsonrpc": "2.0", "id": p.next, "method": method}
	if params != nil {
		msg["params"] = params
	}
	resp := p.post(t, string(mustMarshal(msg)))
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s on /mcp: HTTP %d %s", method, resp.StatusCode, body)
	}
	var all []rpcMsg
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		r := &sseEvents{r: bufio.NewReader(strings.NewReader(string(body)))}
		for {
			_, data, err := r.next()
			if err != nil {
				break
			}
			var m rpcMsg
			if json.Unmarshal([]byte(data), &m) != nil {
				t.Fatalf("%s on /mcp: event is not JSON-RPC: %s", method, data)
			}
			all = append(all, m)
		}
	} else {
		var m rpcMsg
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("%s on /mcp: answer is not JSON-RPC: %v: %s", method, err, body)
		}
		all = append(all, m)
	}
	if len(all) == 0 {
		t.Fatalf("%s on /mcp: no answer", method)
	}
	return all[len(all)-1], all[:len(all)-1]
}

func (p *mcpPeer) listChanged(t *testing.T) {
	t.Helper()
	for {
		select {
		case ev := <-p.notes:
			if ev.err != nil {
				t.Fatalf("GET stream ended before tools/list_changed: %v", ev.err)
			}
			if strings.Contains(ev.data, `"notifications/tools/list_changed"`) {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no tools/list_changed on the GET stream within 10s")
		}
	}
}

func (p *mcpPeer) ended(t *testing.T) string {
	t.Helper()
	resp := p.post(t, `{"jsonrpc":"2.0","id":99,"method":"ping"}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// 404 sends the client to initialize again; a token no longer
	// configured gets 401 first, as on any request.
	if resp.StatusCode != http.StatusNotFound && (resp.StatusCode != p.refused || p.refused == 0) {
		t.Fatalf("ping on an ended /mcp session: HTTP %d %s, want 404", resp.StatusCode, body)
	}
	for {
		select {
		case ev := <-p.notes:
			if ev.err != nil {
				return string(body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the ended session's GET stream is still open after 10s")
		}
	}
}

// --- stream doors ---

// streamPeer is a session of /ws, /sse or stdio, over a peer.
type streamPeer struct {
	p    peer
	next int
	end  func(t *testing.T) string
}

func (sp *streamPeer) ask(t *testing.T, method string, params any) (rpcMsg, []rpcMsg) {
	t.Helper()
	sp.next++
	msg := map[string]any{"jsonrpc": "2.0", "id": sp.next, "method": method}
	if params != nil {
		msg["params"] = params
	}
	sp.p.send(t, string(mustMarshal(msg)))
	var seen []rpcMsg
	m := await(t, sp.p, sp.next, &seen)
	return m, seen
}

func (sp *streamPeer) listChanged(t *testing.T) {
	t.Helper()
	for sp.p.recv(t).Method != "notifications/tools/list_changed" {
	}
}

func (sp *streamPeer) ended(t *testing.T) string { t.Helper(); return sp.end(t) }

func openWSPeer(t *testing.T, hs *httptest.Server, auth string) reloadPeer {
	t.Helper()
	p := openWSPeerRaw(t, hs, auth)
	initializeAs(t, p.p, map[string]any{})
	return p
}

// openWSPeerRaw connects to /ws without initializing.
func openWSPeerRaw(t *testing.T, hs *httptest.Server, auth string) *streamPeer {
	t.Helper()
	hdr := http.Header{}
	if auth != "" {
		hdr.Set("Authorization", auth)
	}
	p := dialWSPeer(t, hs, "", hdr)
	return &streamPeer{p: p, next: 100, end: openWSPeerEnd(p)}
}

// openWSPeerEnd is the ended check of a websocket: the connection closes
// with 1008, and the reason is returned.
func openWSPeerEnd(p *wsPeer) func(t *testing.T) string {
	return func(t *testing.T) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			_, _, err := p.c.Read(ctx)
			if err == nil {
				continue
			}
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("websocket of an ended session: %v, want a close frame", err)
			}
			if ce.Code != websocket.StatusPolicyViolation {
				t.Fatalf("websocket closed with %d %q, want 1008", ce.Code, ce.Reason)
			}
			return ce.Reason
		}
	}
}

// rawSSEPeer is a legacy SSE client that keeps the stream's comments.
type rawSSEPeer struct {
	ssePeer
	lines chan string // the stream's lines, closed at its end
}

func (p *rawSSEPeer) recv(t *testing.T) rpcMsg {
	t.Helper()
	var name, data string
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatal("SSE stream ended")
			}
			switch {
			case line == "" && name != "":
				if name != "message" {
					t.Fatalf("event %q, want message", name)
				}
				var m rpcMsg
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					t.Fatalf("event data is not JSON-RPC: %v: %s", err, data)
				}
				return m
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data += strings.TrimPrefix(line, "data: ")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no SSE event within 10s")
		}
	}
}

func openSSEPeer(t *testing.T, hs *httptest.Server, auth string) reloadPeer {
	t.Helper()
	return openSSEPeerAt(t, hs, "/sse", auth)
}

// openSSEPeerAt is openSSEPeer with the stream opened at path.
func openSSEPeerAt(t *testing.T, hs *httptest.Server, path, auth string) reloadPeer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{}
	if auth != "" {
		hdr.Set("Authorization", auth)
		req.Header.Set("Authorization", auth)
	}
	resp, err := hs.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET /sse: %v %v", err, resp)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	p := &rawSSEPeer{ssePeer: ssePeer{hs: hs, hdr: hdr}, lines: make(chan string, 256)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	for line := range p.lines {
		if ep, ok := strings.CutPrefix(line, "data: "); ok {
			p.endpoint = ep
			break
		}
	}
	initializeAs(t, p, map[string]any{})
	return &streamPeer{p: p, next: 100, end: func(t *testing.T) string {
		var comments []string
		for {
			select {
			case line, ok := <-p.lines:
				if !ok {
					if code, body := p.post(t, p.endpoint, `{"jsonrpc":"2.0","id":99,"method":"ping"}`, p.hdr); code != http.StatusNotFound {
						t.Fatalf("POST to an ended SSE session: %d %s, want 404", code, body)
					}
					return strings.Join(comments, "\n")
				}
				if c, ok := strings.CutPrefix(line, ": "); ok && c != "keepalive" {
					comments = append(comments, c)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the ended session's SSE stream is still open after 10s")
			}
		}
	}}
}

func openStdioPeer(t *testing.T, s *Server) reloadPeer {
	t.Helper()
	p := startStdio(t, s, context.Background(), "")
	initializeAs(t, p, map[string]any{})
	return &streamPeer{p: p, next: 100, end: func(t *testing.T) string {
		select {
		case err := <-p.done:
			p.done <- err // for startStdio's cleanup
			if err == nil {
				t.Fatal("ServeStdio returned nil for a session a reload ended")
			}
			return err.Error()
		case <-time.After(10 * time.Second):
			t.Fatal("ServeStdio still serving an ended session after 10s")
			return ""
		}
	}}
}

// --- the table ---

// reloadCase is one config edit and what it must do to a live session
// opened, naming no profile, with the token "tok-ro" where tokens are
// configured: that session is bound to readonly (tools 0, 2, 4 of six).
type reloadCase struct {
	name string
	edit func(base string) string
	// ends: the session must end, saying so with these words; else it
	// stays and lists want.
	ends []string
	want []string
	// tokenGone: the edit removes the session's token (see mcpPeer).
	tokenGone bool
	// changed: the session is told tools/list_changed; else it is told
	// nothing.
	changed bool
	// sameKey: none of the session's rules changed, so its filter keeps
	// its key.
	sameKey bool
	// calls: this many calls of a listed tool are allowed, and one more is
	// refused by the rate limit (0: not checked).
	calls int
}

func names(ns ...int) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = fmt.Sprintf("up__tool_%04d", n)
	}
	return out
}

// authBase is the config of the table with tokens.
const authBase = `
[profiles.readonly]
read_only = true
[profiles.readonly.rate]
calls_per_minute = 3
[profiles.all]

[[auth.tokens]]
token = "tok-ro"
profiles = ["readonly", "all"]

[[auth.tokens]]
token = "tok-other"
profiles = ["all"]
`

// openBase is the config of the table without tokens (loopback).
const openBase = `
[server]
default_profile = "readonly"
[profiles.readonly]
read_only = true
[profiles.readonly.rate]
calls_per_minute = 3
[profiles.all]
`

func replace(old, new string) func(string) string {
	return func(base string) string {
		if !strings.Contains(base, old) {
			panic("reload case edits text not in its base: " + old)
		}
		return strings.Replace(base, old, new, 1)
	}
}

// commonCases are the cases of both tables.
var commonCases = []reloadCase{
	{name: "comment-only edit", edit: func(b string) string { return "# reviewed\n" + b + "# end\n" },
		want: names(0, 2, 4), sameKey: true},
	{name: "profile widened", edit: replace("read_only = true\n", "allow = [\"up__*\"]\n"),
		want: names(0, 2, 4)},
	{name: "profile narrowed", edit: replace("read_only = true\n", "read_only = true\ndeny = [\"up__tool_0002\"]\n"),
		want: names(0, 4), changed: true},
	{name: "rate limit removed", edit: replace("[profiles.readonly.rate]\ncalls_per_minute = 3\n", ""),
		want: names(0, 2, 4), sameKey: true, calls: 3},
	{name: "rate limit loosened", edit: replace("calls_per_minute = 3", "calls_per_minute = 1000"),
		want: names(0, 2, 4), sameKey: true, calls: 3},
	{name: "rate limit tightened", edit: replace("calls_per_minute = 3", "calls_per_minute = 1"),
		want: names(0, 2, 4), sameKey: true, calls: 1},
}

var authCases = append(slices.Clone(commonCases),
	reloadCase{name: "token default profile changed", edit: replace(`profiles = ["readonly", "all"]`, `profiles = ["all", "readonly"]`),
		want: names(0, 2, 4), sameKey: true},
	reloadCase{name: "token removed", edit: replace("token = \"tok-ro\"\nprofiles = [\"readonly\", \"all\"]\n", "token = \"tok-new\"\nprofiles = [\"readonly\", \"all\"]\n"),
		ends: []string{"config changed", "token was removed"}, tokenGone: true},
	reloadCase{name: "token no longer allows the profile", edit: replace(`profiles = ["readonly", "all"]`, `profiles = ["all"]`),
		ends: []string{"config changed", `not allowed for this token: "readonly"`}},
	reloadCase{name: "profile removed", edit: func(b string) string {
		b = replace("[profiles.readonly]\nread_only = true\n[profiles.readonly.rate]\ncalls_per_minute = 3\n", "")(b)
		return replace(`profiles = ["readonly", "all"]`, `profiles = ["all"]`)(b)
	}, ends: []string{"config changed", `"readonly"`}},
)

var openCases = append(slices.Clone(commonCases),
	reloadCase{name: "default profile changed", edit: replace(`default_profile = "readonly"`, `default_profile = "all"`),
		want: names(0, 2, 4), sameKey: true},
	reloadCase{name: "profile removed", edit: func(b string) string {
		b = replace("[profiles.readonly]\nread_only = true\n[profiles.readonly.rate]\ncalls_per_minute = 3\n", "")(b)
		return replace(`default_profile = "readonly"`, `default_profile = "all"`)(b)
	}, ends: []string{"config changed", `unknown profile "readonly"`}},
)

// doorCase opens one live session on one doorCase of s (served by hs) with the
// bearer token tok ("" = none).
type doorCase struct {
	name string
	open func(t *testing.T, s *Server, hs *httptest.Server, tok string) reloadPeer
}

var httpDoors = []doorCase{
	{"mcp", func(t *testing.T, _ *Server, hs *httptest.Server, tok string) reloadPeer {
		return openMCPPeer(t, hs, bearerOf(tok))
	}},
	{"sse", func(t *testing.T, _ *Server, hs *httptest.Server, tok string) reloadPeer {
		return openSSEPeer(t, hs, bearerOf(tok))
	}},
	{"ws", func(t *testing.T, _ *Server, hs *httptest.Server, tok string) reloadPeer {
		return openWSPeer(t, hs, bearerOf(tok))
	}},
}

var stdioDoor = doorCase{"stdio", func(t *testing.T, s *Server, _ *httptest.Server, _ string) reloadPeer {
	return openStdioPeer(t, s)
}}

func bearerOf(tok string) string {
	if tok == "" {
		return ""
	}
	return "Bearer " + tok
}

// runReloadTable runs every case on every door: a new server with base,
// one session opened on the door, the edit applied by Reload.
func runReloadTable(t *testing.T, base, tok string, cases []reloadCase, doors []doorCase) {
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					up := newUpstreamServer(t, 6)
					s := newBenchServer(t, up.http.URL, base)
					hs := httptest.NewServer(s.Handler())
					t.Cleanup(hs.Close)
					p := d.open(t, s, hs, tok)
					if got := listedBy(t, p); !slices.Equal(got, names(0, 2, 4)) {
						t.Fatalf("before the reload the session lists %q, want readonly's", got)
					}
					keys := filterKeys(s)
					cfg, err := configs.Parse("reload.toml", []byte(fmt.Sprintf("[upstreams.up]\nurl = %q\n%s", up.http.URL, tc.edit(base))), nil)
					if err != nil {
						t.Fatal(err)
					}
					if err := s.Reload(cfg); err != nil {
						t.Fatal(err)
					}
					before := up.requests.Load()
					if tc.ends != nil {
						if mp, ok := p.(*mcpPeer); ok && tc.tokenGone {
							mp.refused = http.StatusUnauthorized
						}
						said := p.ended(t)
						for _, w := range tc.ends {
							if !strings.Contains(said, w) && d.name != "mcp" {
								t.Errorf("the door said %q on ending the session, want %q in it", said, w)
							}
						}
						if n := up.requests.Load() - before; n != 0 {
							t.Fatalf("the ended session reached the upstream %d times", n)
						}
						if n := s.Sessions(); n != 0 {
							t.Fatalf("%d sessions still bound", n)
						}
						return
					}
					if tc.changed {
						p.listChanged(t)
					}
					got, seen := listedWith(t, p)
					if !slices.Equal(got, tc.want) {
						t.Fatalf("after the reload the session lists %q, want %q", got, tc.want)
					}
					if !tc.changed {
						for _, m := range seen {
							if strings.HasSuffix(m.Method, "list_changed") {
								t.Fatalf("told %s though its view did not change", m.Method)
							}
						}
					}
					if after := filterKeys(s); tc.sameKey && !slices.Equal(after, keys) {
						t.Fatalf("the session's filter key changed from %q to %q", keys, after)
					}
					// A tool outside readonly stays refused, without
					// reaching the upstream.
					if m, _ := p.ask(t, "tools/call", map[string]any{"name": "up__tool_0001", "arguments": map[string]any{"query": "x"}}); m.Error == nil || m.Error.Code != -32601 {
						t.Fatalf("call of a tool readonly hides: %+v %s, want -32601", m.Error, m.Result)
					}
					if n := up.requests.Load() - before; n != 0 {
						t.Fatalf("a refused call reached the upstream %d times", n)
					}
					for i := range tc.calls {
						if m, _ := p.ask(t, "tools/call", map[string]any{"name": tc.want[0], "arguments": map[string]any{"query": "x"}}); m.Error != nil {
							t.Fatalf("call %d within the limit: %+v", i+1, m.Error)
						}
					}
					if tc.calls > 0 {
						if m, _ := p.ask(t, "tools/call", map[string]any{"name": tc.want[0], "arguments": map[string]any{"query": "x"}}); m.Error == nil || m.Error.Code != rateLimited {
							t.Fatalf("call %d in a minute with a limit of %d: %+v %s, want -32029", tc.calls+1, tc.calls, m.Error, m.Result)
						}
					}
				})
			}
		})
	}
}

// listedBy lists the session's tools.
func listedBy(t *testing.T, p reloadPeer) []string {
	t.Helper()
	got, _ := listedWith(t, p)
	return got
}

// listedWith lists the session's tools, with the messages that came
// before the answer.
func listedWith(t *testing.T, p reloadPeer) ([]string, []rpcMsg) {
	t.Helper()
	m, seen := p.ask(t, "tools/list", nil)
	var res struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
		t.Fatalf("tools/list: %+v %s", m.Error, m.Result)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	return out, seen
}

// filterKeys returns the filter keys of the bound sessions, sorted.
func filterKeys(s *Server) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for _, sess := range s.sessions {
		keys = append(keys, sess.binding.Filter.Key())
	}
	slices.Sort(keys)
	return keys
}

// TestReloadWithTokens is the reload table with [[auth.tokens]], on /mcp,
// /sse and /ws: a session opened with tok-ro (default profile readonly)
// keeps its profile and can only be narrowed, or ends.
func TestReloadWithTokens(t *testing.T) {
	runReloadTable(t, authBase, "tok-ro", authCases, httpDoors)
}

// TestReloadWithoutTokens is the reload table with no tokens configured,
// on every door, stdio included: a session bound to server.default_profile
// keeps it and can only be narrowed, or ends when its profile is removed.
func TestReloadWithoutTokens(t *testing.T) {
	runReloadTable(t, openBase, "", openCases, append(slices.Clone(httpDoors), stdioDoor))
}

// TestReloadRequiringTokens checks that sessions opened without a token
// end when a reload configures tokens, on every HTTP door, while the
// stdio session, which never needs one, stays.
func TestReloadRequiringTokens(t *testing.T) {
	tokens := openBase + "[[auth.tokens]]\ntoken = \"tok-ro\"\nprofiles = [\"readonly\"]\n"
	doors := append(slices.Clone(httpDoors), stdioDoor)
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			up := newUpstreamServer(t, 6)
			s := newBenchServer(t, up.http.URL, openBase)
			hs := httptest.NewServer(s.Handler())
			t.Cleanup(hs.Close)
			p := d.open(t, s, hs, "")
			cfg, err := configs.Parse("reload.toml", []byte(fmt.Sprintf("[upstreams.up]\nurl = %q\n%s", up.http.URL, tokens)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Reload(cfg); err != nil {
				t.Fatal(err)
			}
			if d.name == "stdio" {
				if got := listedBy(t, p); !slices.Equal(got, names(0, 2, 4)) {
					t.Fatalf("stdio after tokens were configured lists %q", got)
				}
				return
			}
			if mp, ok := p.(*mcpPeer); ok {
				mp.refused = http.StatusUnauthorized
			}
			said := p.ended(t)
			if d.name != "mcp" && !strings.Contains(said, "opened without one") {
				t.Fatalf("the door said %q, want the reason", said)
			}
		})
	}
}

// TestReloadRemovedTokenStateless checks that a 2026-07-28 request, which
// is resolved per request, is refused 401 once a reload removed its
// token, and that an open listen stream of that token is closed.
func TestReloadRemovedTokenStateless(t *testing.T) {
	up := newUpstreamServer(t, 6)
	s := newBenchServer(t, up.http.URL, authBase)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	modern := func(ctx context.Context, method, params string) *http.Response {
		body := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{` + params +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/mcp", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		req.Header.Set("Authorization", "Bearer tok-ro")
		if method == "tools/call" {
			req.Header.Set("Mcp-Name", "up__tool_0000")
		}
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	call := func() (int, string) {
		resp := modern(context.Background(), "tools/call", `"name":"up__tool_0000","arguments":{"query":"x"},`)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := call(); code != http.StatusOK || !strings.Contains(body, `"result"`) {
		t.Fatalf("stateless call before the reload: %d %s", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listen := modern(ctx, "subscriptions/listen", `"notifications":{"toolsListChanged":true},`)
	defer listen.Body.Close()
	if listen.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(listen.Body)
		t.Fatalf("subscriptions/listen: %d %s", listen.StatusCode, b)
	}
	lines := bufio.NewReader(listen.Body)
	if line, err := lines.ReadString('\n'); err != nil || !strings.HasPrefix(line, "event: ") && !strings.HasPrefix(line, "data: ") {
		t.Fatalf("listen stream's first line: %q %v", line, err)
	}
	cfg, err := configs.Parse("reload.toml", []byte(fmt.Sprintf("[upstreams.up]\nurl = %q\n%s", up.http.URL,
		strings.Replace(authBase, `token = "tok-ro"`, `token = "tok-new"`, 1))), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	before := up.requests.Load()
	if code, body := call(); code != http.StatusUnauthorized {
		t.Fatalf("stateless call with a removed token: %d %s, want 401", code, body)
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("the refused call reached the upstream %d times", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, lines)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("listen stream ended with %v, want its end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the removed token's listen stream is still open after 10s")
	}
}

// reloadWith applies base, edited, to s, whose upstream is up.
func reloadWith(t *testing.T, s *Server, up *upstreamServer, text string) {
	t.Helper()
	cfg, err := configs.Parse("reload.toml", []byte(fmt.Sprintf("[upstreams.up]\nurl = %q\n%s", up.http.URL, text)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(cfg); err != nil {
		t.Fatal(err)
	}
}

// TestReloadKeepsSelectingSessions checks that a session whose every
// request names its profile and narrowing (a path, a query) keeps working
// across a reload that changed its rules, and is not widened: what the
// request names is compared with what the session asked for, not with its
// narrowed filter. With tokens, a request naming only a narrowing is read
// under the session's own profile when the token's default changed.
func TestReloadKeepsSelectingSessions(t *testing.T) {
	t.Run("profile in the path, widened", func(t *testing.T) {
		up := newUpstreamServer(t, 6)
		s := newBenchServer(t, up.http.URL, openBase)
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(hs.Close)
		p := openMCPPeerAt(t, hs, "/mcp/p/readonly?tools=up__tool_0000,up__tool_0001,up__tool_0002", "")
		if got := listedBy(t, p); !slices.Equal(got, names(0, 2)) {
			t.Fatalf("before the reload: %q", got)
		}
		reloadWith(t, s, up, replace("read_only = true\n", "")(openBase))
		if got := listedBy(t, p); !slices.Equal(got, names(0, 2)) {
			t.Fatalf("after the profile was widened: %q, want %q", got, names(0, 2))
		}
	})
	t.Run("token default changed, narrowing in the query", func(t *testing.T) {
		up := newUpstreamServer(t, 6)
		s := newBenchServer(t, up.http.URL, authBase)
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(hs.Close)
		p := openMCPPeerAt(t, hs, "/mcp?tools=up__tool_0000,up__tool_0001,up__tool_0002", "Bearer tok-ro")
		if got := listedBy(t, p); !slices.Equal(got, names(0, 2)) {
			t.Fatalf("before the reload: %q", got)
		}
		reloadWith(t, s, up, replace(`profiles = ["readonly", "all"]`, `profiles = ["all", "readonly"]`)(authBase))
		if got := listedBy(t, p); !slices.Equal(got, names(0, 2)) {
			t.Fatalf("after the token's default changed: %q, want %q", got, names(0, 2))
		}
	})
}

// TestReloadBeforeInitialize checks stream sessions that connected but
// have not initialized when a reload comes: their grant is re-derived
// too, never widened, or the session ends.
func TestReloadBeforeInitialize(t *testing.T) {
	t.Run("widened", func(t *testing.T) {
		up := newUpstreamServer(t, 6)
		s := newBenchServer(t, up.http.URL, authBase)
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(hs.Close)
		ws := dialWSPeer(t, hs, "", http.Header{"Authorization": {"Bearer tok-ro"}})
		waitStreams(t, s, 1)
		reloadWith(t, s, up, replace("read_only = true\n", "")(authBase))
		initializeAs(t, ws, map[string]any{})
		if got := toolNames(t, ws, 2); !slices.Equal(got, names(0, 2, 4)) {
			t.Fatalf("after the profile was widened: %q, want readonly's", got)
		}
	})
	t.Run("token removed", func(t *testing.T) {
		up := newUpstreamServer(t, 6)
		s := newBenchServer(t, up.http.URL, authBase)
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(hs.Close)
		p := openWSPeerRaw(t, hs, "Bearer tok-ro")
		waitStreams(t, s, 1)
		reloadWith(t, s, up, strings.Replace(authBase, `token = "tok-ro"`, `token = "tok-new"`, 1))
		if said := p.ended(t); !strings.Contains(said, "token was removed") {
			t.Fatalf("close reason %q", said)
		}
	})
}

// TestReloadRacingABind checks the sessions a reload cannot see: one whose
// binding was resolved under the old config but that binds, or first
// speaks, after the reload. Its grant is re-derived then, as the reload
// did for every other session: never wider, or the session ends.
func TestReloadRacingABind(t *testing.T) {
	removed := strings.Replace(authBase, `token = "tok-ro"`, `token = "tok-new"`, 1)
	widened := replace("read_only = true\n", "")(authBase)
	tok := grant.Selection{Token: "tok-ro", HasToken: true}
	for _, tt := range []struct {
		name, edit string
		ends       bool
	}{
		{"token removed", removed, true},
		{"profile widened", widened, false},
	} {
		t.Run("/mcp registers after the reload: "+tt.name, func(t *testing.T) {
			up := newUpstreamServer(t, 6)
			s := newBenchServer(t, up.http.URL, authBase)
			stale, err := s.Resolver().Resolve(tok)
			if err != nil {
				t.Fatal(err)
			}
			reloadWith(t, s, up, tt.edit)
			s.takeSlot(stale.Who) // as serveInitialize does
			s.bind(s.newSession("stub-session", doorMCP, stale, [32]byte{}, nil), &handshake{})
			s.mu.Lock()
			sess := s.sessions["stub-session"]
			s.mu.Unlock()
			if tt.ends {
				if sess != nil {
					t.Fatalf("a session whose token a reload removed was bound: %+v", sess.binding)
				}
				return
			}
			if sess == nil {
				t.Fatal("the session was not bound")
			}
			if got := s.View(sess.binding).Len(); got != 3 {
				t.Fatalf("the session registered after the widening sees %d tools, want readonly's 3", got)
			}
		})
		t.Run("a stream connected before the reload speaks after it: "+tt.name, func(t *testing.T) {
			up := newUpstreamServer(t, 6)
			s := newBenchServer(t, up.http.URL, authBase)
			stale, err := s.Resolver().Resolve(tok)
			if err != nil {
				t.Fatal(err)
			}
			reloadWith(t, s, up, tt.edit)
			frames := make(chan []byte, 16)
			ss := s.newStreamSession(context.Background(), doorWS, stale, frameWriterFunc(func(b []byte) error {
				frames <- b
				return nil
			}))
			t.Cleanup(func() { ss.Close(nil) })
			if err := s.admit(ss); err != nil {
				t.Fatal(err)
			}
			ss.Receive([]byte(initializeBody))
			if tt.ends {
				select {
				case <-ss.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the session of a removed token is still open")
				}
				if cause := ss.Cause(); !errors.Is(cause, errConfigChanged) {
					t.Fatalf("the session ended with %v, want the config change", cause)
				}
				return
			}
			ss.Receive([]byte(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
			for {
				select {
				case f := <-frames:
					var m rpcMsg
					if json.Unmarshal(f, &m) != nil || string(m.ID) != "2" {
						continue
					}
					var res struct {
						Tools []struct{ Name string } `json:"tools"`
					}
					if json.Unmarshal(m.Result, &res) != nil || len(res.Tools) != 3 {
						t.Fatalf("tools/list after the widening: %s, want readonly's 3 tools", m.Result)
					}
					return
				case <-time.After(10 * time.Second):
					t.Fatal("no answer to tools/list")
				}
			}
		})
	}
}

// TestReloadRemovedToolset checks a session that narrowed itself to a
// toolset the new config no longer has: its narrowing no longer resolves,
// so the session ends, as a new request naming that toolset is refused.
func TestReloadRemovedToolset(t *testing.T) {
	const sets = "[upstreams.up.toolsets]\nfirst = [\"tool_000[0-2]\"]\n"
	for _, d := range httpDoors {
		t.Run(d.name, func(t *testing.T) {
			up := newUpstreamServer(t, 6)
			s := newBenchServer(t, up.http.URL, sets+openBase)
			hs := httptest.NewServer(s.Handler())
			t.Cleanup(hs.Close)
			var p reloadPeer
			switch d.name {
			case "mcp":
				mp := openMCPPeerAt(t, hs, "/mcp/x/up/first", "")
				mp.refused = http.StatusBadRequest // the path no longer resolves
				p = mp
			case "ws":
				ws := dialWSPeer(t, hs, "/x/up/first", nil)
				initializeAs(t, ws, map[string]any{})
				p = &streamPeer{p: ws, next: 100, end: openWSPeerEnd(ws)}
			case "sse":
				p = openSSEPeerAt(t, hs, "/sse/x/up/first", "")
			}
			if got := listedBy(t, p); !slices.Equal(got, names(0, 2)) {
				t.Fatalf("before the reload: %q", got)
			}
			reloadWith(t, s, up, openBase)
			said := p.ended(t)
			if d.name != "mcp" && !strings.Contains(said, `unknown toolset "up/first"`) {
				t.Fatalf("the door said %q, want the toolset named", said)
			}
		})
	}
}
