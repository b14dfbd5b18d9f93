// Command floor is the baseline viewmux's performance bars are measured
// against: the cheapest possible extra HTTP hop in front of an MCP
// upstream, an httputil reverse proxy that forwards bodies byte for byte in
// both directions, flushes every write of a streamed (SSE) response at
// once, and reuses its upstream connections. It knows nothing about MCP.
//
//	floor -upstream http://127.0.0.1:PORT
//
// It listens on a loopback port, prints its URL (…/mcp) on the first line
// of stdout, and serves until its stdin closes or it is signalled: the
// protocol integration/load and integration/hopprobe start it with.
//
// It is a program of its own, built apart from the tools that measure
// through it, because a proxy run as a copy of the measuring program was
// measured faster than the same proxy built alone: about 20 µs of a
// 300 µs call at one call at a time (integration/hopprobe prints both).
// The measuring program is the client and the upstream, and the proxy's
// code then sits at the same addresses as theirs; viewmux never does. Built
// alone, the floor is what a reverse proxy in front of an upstream really
// is, and what viewmux is: a separate binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// idleConns is how many idle connections the floor keeps to the upstream:
// above the 16 concurrent clients of the load tool's throughput phase (and
// http.DefaultTransport's 2 per host, which would make the floor open a new
// upstream connection for most calls under load).
const idleConns = 64

func main() {
	upstream := flag.String("upstream", "", "the upstream's `URL` (scheme and host; a path is ignored, the request's own is kept)")
	listen := flag.String("listen", "127.0.0.1:0", "`ADDR` to listen on")
	flag.Parse()
	if err := run(*upstream, *listen); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(upstream, listen string) error {
	target, err := url.Parse(upstream)
	if err != nil || target.Scheme == "" || target.Host == "" {
		return fmt.Errorf("-upstream %q: want an absolute http URL", upstream)
	}
	target.Path, target.RawPath = "", ""
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: fullDuplex(newProxy(target)), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Println("http://" + ln.Addr().String() + "/mcp")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // the parent closes stdin when it is done, or dies
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// newProxy returns the reverse proxy to target.
func newProxy(target *url.URL) *httputil.ReverseProxy {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = idleConns
	t.MaxIdleConnsPerHost = idleConns
	return &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     t,
		FlushInterval: -1,
	}
}

// fullDuplex lets h keep reading the request body after it has started
// the response. Without it, net/http's HTTP/1 server drains and closes the
// request body when the response headers go out; the proxy's Transport,
// which reads the body once more after the declared length to check there
// is nothing left, then fails the write and tears down the upstream
// connection under a response it is still streaming (golang/go#40747). An
// upstream that answers an SSE stream quickly (a tools/call with progress
// notifications) hits that often enough to break calls.
func fullDuplex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			http.Error(w, "floor: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	})
}
