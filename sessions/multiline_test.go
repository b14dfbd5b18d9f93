package sessions

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpmux/mcpmux/upstream/wire"
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
