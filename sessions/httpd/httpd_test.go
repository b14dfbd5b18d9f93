package httpd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestReadTimeout serves a handler behind WithReadTimeout on a real
// loopback server: a body trickled slower than the deadline fails to read
// and the connection is closed, while a response streamed for longer than
// the deadline, after its body was read, is not cut.
func TestReadTimeout(t *testing.T) {
	const d = 300 * time.Millisecond
	h := WithReadTimeout(d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 5 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(d):
			}
		}
	}))
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	t.Run("a long response after the body is whole", func(t *testing.T) {
		resp, err := http.Post(hs.URL, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || strings.Count(string(body), "data:") != 5 {
			t.Fatalf("streamed answer cut short: %q, %v", body, err)
		}
	})
	t.Run("a body that does not arrive", func(t *testing.T) {
		c, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
		c.SetReadDeadline(time.Now().Add(30 * time.Second)) // far beyond d: only a hang fails
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a trickled body: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "timeout") {
			t.Fatalf("trickled body: %d %s, want 400 naming the timeout", resp.StatusCode, body)
		}
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("the connection stayed open after the body timed out: %v", err)
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
