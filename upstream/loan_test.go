package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
)

// TestBufClass: a pooled buffer is at most a quarter larger than what it
// holds, and a buffer's own size names its class.
func TestBufClass(t *testing.T) {
	for n := minPooled + 1; n < 64<<20; n += n/7 + 1 {
		class, size := bufClass(n)
		if size < n || size > n+n/4+1 {
			t.Fatalf("bufClass(%d) = size %d", n, size)
		}
		if c2, s2 := bufClass(size); c2 != class || s2 != size {
			t.Fatalf("bufClass(%d) = %d/%d, but bufClass(%d) = %d/%d", n, class, size, size, c2, s2)
		}
	}
}

// TestLoanedResult: a large tools/call result read under a loan, from a
// JSON body (of known length or not) or an event stream, is in a pooled
// buffer the loan takes back on Release (tests poison what is taken
// back); without a loan, or for a method whose result viewmux keeps, or for
// a message that is not the request's answer, it is the caller's own.
func TestLoanedResult(t *testing.T) {
	text := strings.Repeat("x", 200<<10)
	result := `{"content":[{"type":"text","text":"` + text + `"}]}`
	var wrongID atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&m) != nil {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if len(m.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		id := string(m.ID)
		if m.Method == "tools/call" && wrongID.Load() {
			id = `"someone-else"`
		}
		body := `{"jsonrpc":"2.0","id":` + id + `,"result":`
		switch m.Method {
		case "initialize":
			body += `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"big","version":"1"}}}`
		case "tools/list":
			body += `{"tools":[{"name":"big","inputSchema":{"type":"object"}}]}}`
		case "tools/call", "prompts/get":
			body += result + `}`
		default:
			body += `{}}`
		}
		if r.URL.Query().Has("sse") && m.Method == "tools/call" {
			// A large message that is not the answer comes first.
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `event: message`+"\ndata: "+`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`+text+`"}}`+"\n\n")
			io.WriteString(w, "data: "+body+"\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Has("chunked") {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
		} else {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(ts.Close)

	for _, path := range []string{"/mcp", "/mcp?chunked", "/mcp?sse"} {
		cfg := &configs.Upstream{Name: "big", Transport: configs.TransportHTTP, URL: ts.URL + path,
			ConnectTimeout: 10 * time.Second, CallTimeout: 30 * time.Second, MaxMessageBytes: 16 << 20}
		opts := fastOptions(&logSink{})
		opts.ProbeInterval = -1
		u := New(cfg, opts)
		startUpstream(t, u)
		call := func(ctx context.Context, method string) json.RawMessage {
			t.Helper()
			res, err := u.Send(ctx, Request{Method: method, Target: "big", Params: json.RawMessage(`{"name":"big"}`)})
			if err != nil || string(res) != result {
				t.Fatalf("%s %s: %d bytes, %v", path, method, len(res), err)
			}
			return res
		}
		poisoned := func(res json.RawMessage) bool { return bytes.Count(res, []byte("#")) == len(res) }

		loan := new(Loan)
		res := call(WithLoan(context.Background(), loan), "tools/call")
		if len(loan.bufs) != 1 {
			t.Errorf("%s: %d buffers lent for one result", path, len(loan.bufs))
		}
		loan.Release()
		if !poisoned(res) {
			t.Errorf("%s: a result read under a loan was not taken back on Release", path)
		}

		res = call(context.Background(), "tools/call")
		own := call(WithLoan(context.Background(), nil), "tools/call")
		loan = new(Loan)
		kept := call(WithLoan(context.Background(), loan), "prompts/get")
		loan.Release()
		if string(res) != result || string(own) != result || string(kept) != result {
			t.Errorf("%s: a result read without a loan, or one viewmux keeps, was taken back", path)
		}

		loan = new(Loan)
		loan.Release()
		if _, err := u.Send(WithLoan(context.Background(), loan), Request{Method: "tools/call", Target: "big", Params: json.RawMessage(`{"name":"big"}`)}); err == nil {
			t.Errorf("%s: a result was lent to a released loan", path)
		}

		wrongID.Store(true)
		loan = new(Loan)
		if _, err := u.Send(WithLoan(context.Background(), loan), Request{Method: "tools/call", Target: "big", Params: json.RawMessage(`{"name":"big"}`)}); err == nil {
			t.Errorf("%s: an answer to another request was taken as the result", path)
		}
		if len(loan.bufs) != 0 {
			t.Errorf("%s: an answer handed to the engine was lent", path)
		}
		wrongID.Store(false)
	}
}

// TestLoanBuffer: a large buffer asked of a loan is lent (taken back and,
// in tests, poisoned on Release); a small one, or one asked of no loan or
// of a released one, is the caller's own.
func TestLoanBuffer(t *testing.T) {
	fill := func(b []byte, n int) []byte { return append(b, bytes.Repeat([]byte("y"), n)...) }
	loan := new(Loan)
	big := fill(loan.Buffer(200<<10), 200<<10)
	small := fill(loan.Buffer(100), 100)
	loan.Release()
	if bytes.Count(big, []byte("#")) != len(big) {
		t.Error("a large buffer of a loan was not taken back on Release")
	}
	if bytes.Count(small, []byte("y")) != len(small) {
		t.Error("a small buffer of a loan was taken back")
	}
	var none *Loan
	own := fill(none.Buffer(200<<10), 200<<10)
	late := fill(loan.Buffer(200<<10), 200<<10)
	loan.Release()
	if bytes.Count(own, []byte("y")) != len(own) || bytes.Count(late, []byte("y")) != len(late) {
		t.Error("a buffer of no loan, or of a released one, was taken back")
	}
}
