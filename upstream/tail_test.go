package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// readTail reads a Tail's result to its end, as a door writes it: the
// result's bytes (checked as they pass), then the envelope's end.
func readTail(tail *Tail) ([]byte, error) {
	var out []byte
	var s jsonrpc.ValueScanner
	for {
		b, err := tail.Next()
		if err == io.EOF {
			return out, errors.New("the answer ended inside its result")
		}
		if err != nil {
			return out, err
		}
		n, done, serr := s.Scan(b)
		out = append(out, b[:n]...)
		if serr != nil {
			return out, serr
		}
		if done {
			return out, tail.Finish(b[n:])
		}
	}
}

// TestTail: a large result of a JSON answer, of unknown or known length,
// is handed over unread when the loan allows it, and reads as sent; one
// below the threshold, one whose envelope does not start with the id, or
// a request without Request.Tail, is read whole. Bytes that are not JSON,
// a result past max_message_bytes, or an envelope that does not end as a
// result's fail the reading; a Content-Length past max_message_bytes is
// refused before the result is read. The connection serves the next call
// each time.
func TestTail(t *testing.T) {
	big := `{"content":[{"type":"text","text":"` + strings.Repeat("0123456789", 100<<10) + `"}],"isError":false}`
	const limit int64 = 8 << 20 // past WholeLimit: results stream
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&m) != nil {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if len(m.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		head := `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":`
		body := head + `{}}`
		known := false
		switch m.Method {
		case "initialize":
			body = head + `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"big","version":"1"}}}`
		case "tools/list":
			body = head + `{"tools":[{"name":"big","inputSchema":{"type":"object"}}]}}`
		case "tools/call":
			switch m.Params.Name {
			case "big":
				body = head + big + "}"
			case "known":
				body, known = head+big+"}", true
			case "small":
				body = head + `{"content":[]}}`
			case "resultFirst":
				body = `{"result":` + big + `,"jsonrpc":"2.0","id":` + string(m.ID) + `}`
			case "invalid":
				body = head + big[:len(big)/2] + "\x01" + big[len(big)/2:] + "}"
			case "tooBig":
				body = head + strings.Replace(big, "0123456789", strings.Repeat("x", 100), -1) + "}"
			case "tooBigKnown":
				body, known = head+strings.Replace(big, "0123456789", strings.Repeat("x", 100), -1)+"}", true
			case "secondResult":
				body = head + big + `,"error":{"code":1,"message":"x"}}`
			case "cut":
				body = head + big[:len(big)-10]
			}
		}
		if sse := r.URL.Query().Get("sse"); sse != "" && m.Method == "tools/call" {
			// The answer as an event, after a progress notification and
			// before another; "multi" splits its data into lines, "crlf"
			// ends its lines with CR LF.
			nl := "\n"
			if sse == "crlf" {
				nl = "\r\n"
			}
			if sse == "multi" {
				body = strings.ReplaceAll(body, `,"`, `,`+nl+`data: "`)
			}
			w.Header().Set("Content-Type", "text/event-stream")
			note := `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`
			io.WriteString(w, "event: message"+nl+"data: "+note+nl+nl+": a comment"+nl+"event: message"+nl+"data: "+body+nl+nl+"data: "+note+nl+nl)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if known {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(ts.Close)
	for _, path := range []string{"", "?sse=1", "?sse=multi", "?sse=crlf"} {
		t.Run(path, func(t *testing.T) { testTail(t, ts.URL+path, big, limit, path == "?sse=multi") })
	}
}

func testTail(t *testing.T, url, big string, limit int64, multi bool) {
	cfg := &configs.Upstream{Name: "big", Transport: configs.TransportHTTP, URL: url,
		ConnectTimeout: 10 * time.Second, CallTimeout: 30 * time.Second, MaxMessageBytes: limit}
	opts := fastOptions(&logSink{})
	opts.ProbeInterval = -1
	u := New(cfg, opts)
	startUpstream(t, u)
	if multi {
		big = strings.ReplaceAll(big, `,"`, ",\n\"")
	}
	sse := strings.Contains(url, "sse")

	send := func(name string, tail bool) (json.RawMessage, *Tail, error) {
		loan := new(Loan)
		loan.AllowTail(StreamThreshold)
		t.Cleanup(loan.Release)
		res, err := u.Send(WithLoan(context.Background(), loan), Request{Method: "tools/call", Target: name, Params: json.RawMessage(`{"name":"` + name + `"}`), Tail: tail})
		return res, loan.TakeTail(), err
	}
	for _, c := range []struct {
		name      string
		tail      bool // the result comes as a Tail
		streamErr string
		err       string
	}{
		{name: "big", tail: true},
		{name: "known", tail: true},
		{name: "small"},
		{name: "resultFirst"},
		{name: "invalid", tail: true, streamErr: "control character"},
		{name: "tooBig", tail: true, streamErr: "max_message_bytes"},
		{name: "tooBigKnown", tail: sse, err: "max_message_bytes"},
		{name: "secondResult", tail: true, streamErr: "not that of a result"},
		{name: "cut", tail: true, streamErr: "ended inside"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, tail, err := send(c.name, true)
			if c.err != "" && sse {
				c.streamErr = c.err // no Content-Length on an event stream: counted as it passes
			} else if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || tail != nil {
					t.Fatalf("Send: %v, tail %v; want an error about %q", err, tail != nil, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Send: %v", err)
			}
			if (tail != nil) != c.tail {
				t.Fatalf("handed over as a Tail: %v, want %v", tail != nil, c.tail)
			}
			if tail == nil {
				if len(res) == 0 {
					t.Fatal("no result and no Tail")
				}
				return
			}
			defer tail.Close()
			got, err := readTail(tail)
			switch {
			case c.streamErr == "" && err != nil:
				t.Fatalf("reading the Tail: %v", err)
			case c.streamErr == "" && string(got) != big:
				t.Fatalf("the Tail read %d bytes, not the result's %d", len(got), len(big))
			case c.streamErr != "" && (err == nil || !strings.Contains(err.Error(), c.streamErr)):
				t.Fatalf("reading the Tail: %v; want an error about %q", err, c.streamErr)
			}
		})
		// Whatever happened, the connection serves the next call.
		if res, _, err := send("small", true); err != nil || string(res) != `{"content":[]}` {
			t.Fatalf("after %s: the next call got %s, %v", c.name, res, err)
		}
	}
	if res, tail, err := send("big", false); err != nil || tail != nil || string(res) != big {
		t.Fatalf("without Request.Tail: %d bytes, tail %v, %v; want the result whole", len(res), tail != nil, err)
	}
}
