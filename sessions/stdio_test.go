package sessions

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/sessions/grant"
)

// stdioPeer drives Server.ServeStdio through pipes.
type stdioPeer struct {
	in    *io.PipeWriter
	lines chan string
	done  chan error // ServeStdio's result
}

func startStdio(t *testing.T, s *Server, ctx context.Context, profile string) *stdioPeer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &stdioPeer{in: inW, lines: make(chan string, 64), done: make(chan error, 1)}
	go func() {
		err := s.ServeStdio(ctx, profile, inR, outW)
		outW.Close()
		p.done <- err
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Error("ServeStdio did not return after stdin closed")
		}
	})
	return p
}

func (p *stdioPeer) send(t *testing.T, raw string) {
	t.Helper()
	if _, err := io.WriteString(p.in, raw+"\n"); err != nil {
		t.Fatalf("write stdin: %v", err)
	}
}

func (p *stdioPeer) recv(t *testing.T) rpcMsg {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatal("stdout closed")
		}
		var m rpcMsg
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("stdout line is not JSON-RPC: %v: %q", err, line)
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no line on stdout within 10s")
		return rpcMsg{}
	}
}

func TestStdio(t *testing.T) {
	s, up, _ := newDoorServer(t, "[server]\nmax_body_bytes = \"2KiB\"\n")

	t.Run("profile", func(t *testing.T) {
		checkDoorBasics(t, up, startStdio(t, s, context.Background(), "readonly"))
	})

	t.Run("default profile", func(t *testing.T) {
		p := startStdio(t, s, context.Background(), "")
		initializeAs(t, p, map[string]any{})
		if got := len(toolNames(t, p, 2)); got != 6 {
			t.Fatalf("no profile lists %d tools, want 6", got)
		}
	})

	t.Run("unknown profile", func(t *testing.T) {
		err := s.ServeStdio(context.Background(), "nope", strings.NewReader(""), io.Discard)
		if !errors.Is(err, grant.ErrUnknownProfile) {
			t.Fatalf("err = %v, want ErrUnknownProfile", err)
		}
	})

	t.Run("oversized line answered, reading goes on", func(t *testing.T) {
		p := startStdio(t, s, context.Background(), "readonly")
		initializeAs(t, p, map[string]any{})
		p.send(t, `{"jsonrpc":"2.0","method":"ping","params":{"x":"`+strings.Repeat("y", 100<<10)+`"},"id":"big"}`)
		m := await(t, p, "big", nil)
		if m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "max_body_bytes") {
			t.Fatalf("oversized line: %+v", m.Error)
		}
		if m := rpc(t, p, 3, "ping", nil); m.Error != nil {
			t.Fatalf("ping after oversized line: %+v", m.Error)
		}
	})

	t.Run("stdin closed: answers what it got, then returns nil", func(t *testing.T) {
		p := startStdio(t, s, context.Background(), "readonly")
		initializeAs(t, p, map[string]any{})
		p.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"up__tool_0000","arguments":{"query":"x"}}}`)
		p.in.Close()
		if m := await(t, p, 5, nil); m.Error != nil || !strings.Contains(string(m.Result), `"ok"`) {
			t.Fatalf("call sent just before EOF: %+v %s", m.Error, m.Result)
		}
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup
			if err != nil {
				t.Fatalf("ServeStdio = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("ServeStdio did not return after stdin closed")
		}
	})

	t.Run("context done", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		p := startStdio(t, s, ctx, "readonly")
		initializeAs(t, p, map[string]any{})
		cancel()
		select {
		case err := <-p.done:
			p.done <- err
			if err != nil {
				t.Fatalf("ServeStdio = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("ServeStdio did not return after ctx was cancelled")
		}
	})
}

func TestStdioCancellation(t *testing.T) {
	su := newSlowUpstream(t)
	s := newBenchServer(t, su.url, "")
	checkCancellation(t, su, startStdio(t, s, context.Background(), ""))
}

// TestStreamModernRequests checks stateless (2026-07-28) requests on a
// stream session: no initialize, protocol data in _meta, the same view and
// the same gate.
func TestStreamModernRequests(t *testing.T) {
	s, up, _ := newDoorServer(t, "")
	p := startStdio(t, s, context.Background(), "readonly")
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}
	if m := rpc(t, p, 1, "server/discover", map[string]any{"_meta": meta}); m.Error != nil || !strings.Contains(string(m.Result), `"tools"`) {
		t.Fatalf("server/discover: %+v %s", m.Error, m.Result)
	}
	m := rpc(t, p, 2, "tools/list", map[string]any{"_meta": meta})
	var res struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || len(res.Tools) != 3 || res.Tools[1].Name != "up__tool_0002" {
		t.Fatalf("modern tools/list: %+v %s", m.Error, m.Result)
	}
	before := up.requests.Load()
	m = rpc(t, p, 3, "tools/call", map[string]any{"_meta": meta, "name": "up__tool_0001", "arguments": map[string]any{"query": "x"}})
	if m.Error == nil || m.Error.Code != -32601 {
		t.Fatalf("modern call of a hidden tool: %+v %s", m.Error, m.Result)
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("refused call reached the upstream %d times", n)
	}
	m = rpc(t, p, 4, "tools/call", map[string]any{"_meta": meta, "name": "up__tool_0000", "arguments": map[string]any{"query": "x"}})
	if m.Error != nil || !strings.Contains(string(m.Result), `"ok"`) {
		t.Fatalf("modern call: %+v %s", m.Error, m.Result)
	}
	if got := s.Sessions(); got != 0 {
		t.Fatalf("a stateless client registered %d sessions, want 0", got)
	}
}
