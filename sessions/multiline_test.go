package sessions

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/upstream/wire"
)

// multilineUpstream is a streamable HTTP upstream whose tools/call answer
// is an event stream: a progress notification, then the result as JSON
// spread over several lines (several data: lines, which SSE joins with
// "\n"), as an upstream that pretty-prints may send it.
func multilineUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Meta struct {
					ProgressToken json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			} `json:"params"`
		}
		json.Unmarshal(body, &m)
		w.Header().Set("Content-Type", "application/json")
		switch m.Method {
		case "initialize":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"pretty","version":"1"}}}`, m.ID)
		case "tools/list":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"pretty","inputSchema":{"type":"object"}}]}}`, m.ID)
		case "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%s,\"progress\":1}}\n\n", m.Params.Meta.ProgressToken)
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\ndata:  \"result\": {\ndata:   \"content\": [{\"type\": \"text\", \"text\": \"a\\nb\"}]\ndata:  }\ndata: }\n\n", m.ID)
		default:
			if len(m.ID) == 0 {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID)
		}
	}))
	t.Cleanup(hs.Close)
	return hs
}

// TestMultilineAnswerStaysOneEvent: an answer whose JSON holds line breaks
// between its tokens reaches a /mcp client as one whole event it can
// decode, after the progress that came before it.
func TestMultilineAnswerStaysOneEvent(t *testing.T) {
	up := multilineUpstream(t)
	s := newBenchServer(t, up.URL, "")
	h := s.Handler()
	sid := openSession(t, h, "")
	rec := post(h, "", sid, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"up__pretty","arguments":{},"_meta":{"progressToken":"p1"}}}`)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("answer is %q, want an event stream (progress came first): %s", ct, rec.Body.String())
	}
	br := bufio.NewReader(strings.NewReader(rec.Body.String()))
	var got []string
	for {
		f, err := wire.ReadEvent(br, 1<<20)
		if err != nil {
			break
		}
		got = append(got, string(f.Data))
	}
	if len(got) != 2 || !strings.Contains(got[0], "notifications/progress") {
		t.Fatalf("events: %q", got)
	}
	var answer struct {
		ID     int `json:"id"`
		Result struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(got[1]), &answer); err != nil || answer.ID != 7 || len(answer.Result.Content) != 1 || answer.Result.Content[0].Text != "a\nb" {
		t.Fatalf("the answer event does not decode whole (%v): %q", err, got[1])
	}
}

// TestMultilineAnswerOnStdioDoor: on the stdio door, whose framing is one
// message per line, an upstream's answer with line breaks between its
// tokens stays one line the client decodes whole, and a large answer
// (written in pieces) arrives whole; nothing else appears on the stream.
func TestMultilineAnswerOnStdioDoor(t *testing.T) {
	up := multilineUpstream(t)
	s := newBenchServer(t, up.URL, "")
	p := startStdio(t, s, context.Background(), "")
	p.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	p.recv(t)
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	p.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"up__pretty","arguments":{},"_meta":{"progressToken":"p1"}}}`)
	var lines []string
	for len(lines) < 2 {
		select {
		case line := <-p.lines:
			lines = append(lines, line)
		case <-time.After(10 * time.Second):
			t.Fatalf("lines so far: %q", lines)
		}
	}
	var answer struct {
		ID     int `json:"id"`
		Result struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if !strings.Contains(lines[0], "notifications/progress") {
		t.Fatalf("first line is not the progress: %q", lines[0])
	}
	if err := json.Unmarshal([]byte(lines[1]), &answer); err != nil || answer.ID != 7 || len(answer.Result.Content) != 1 || answer.Result.Content[0].Text != "a\nb" {
		t.Fatalf("the answer line does not decode whole (%v): %q", err, lines[1])
	}
	select {
	case extra := <-p.lines:
		t.Fatalf("a line the client never asked for: %q", extra)
	case <-time.After(200 * time.Millisecond):
	}

	big := newBenchServer(t, rawUpstream(t, 3<<20, false).URL, "")
	q := startStdio(t, big, context.Background(), "")
	q.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	q.recv(t)
	q.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	q.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"up__big","arguments":{}}}`)
	m := q.recv(t)
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(m.Result, &res); err != nil || len(res.Content) != 1 || len(res.Content[0].Text) != 3<<20 {
		t.Fatalf("large answer: %v, %d items", err, len(res.Content))
	}
}
