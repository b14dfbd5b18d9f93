package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// floorEnv, set to the upstream's URL, makes this program run as the floor
// proxy only. The load program always runs the floor this way, as a process
// of its own, so that its CPU time is read from /proc exactly as mcpmux's.
const floorEnv = "MCPMUX_LOAD_FLOOR"

// floorIdleConns is how many idle connections the floor keeps to the
// upstream: above the 16 concurrent clients of the throughput phase (and
// http.DefaultTransport's 2 per host, which would make the floor open a new
// upstream connection for most calls under load).
const floorIdleConns = 64

// newFloor returns the floor the bars are measured against: the cheapest possible extra HTTP
// hop in front of the upstream at target (scheme and host; the request's
// path is kept). It forwards bodies byte for byte, in both directions,
// flushes every write of a streamed (SSE) response at once, and reuses its
// upstream connections. It knows nothing about MCP.
func newFloor(target *url.URL) *httputil.ReverseProxy {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = floorIdleConns
	t.MaxIdleConnsPerHost = floorIdleConns
	return &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     t,
		FlushInterval: -1,
	}
}

// fullDuplex lets h keep reading the request body after it has started
// the response. Without it, net/http's HTTP/1 server drains and closes the
// request body when the response headers go out; the floor's Transport,
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

// floorServer is the floor listening on a loopback port.
type floorServer struct {
	url  string // http://127.0.0.1:PORT/mcp
	srv  *http.Server
	done chan error
}

// startFloor serves a floor for the upstream at upURL (…/mcp) on
// 127.0.0.1:0.
func startFloor(upURL string) (*floorServer, error) {
	target, err := url.Parse(strings.TrimSuffix(upURL, "/mcp"))
	if err != nil {
		return nil, fmt.Errorf("floor: upstream URL: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("floor listen: %w", err)
	}
	f := &floorServer{
		url:  "http://" + ln.Addr().String() + "/mcp",
		srv:  &http.Server{Handler: fullDuplex(newFloor(target)), ReadHeaderTimeout: 10 * time.Second},
		done: make(chan error, 1),
	}
	go func() { f.done <- f.srv.Serve(ln) }()
	return f, nil
}

func (f *floorServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := f.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = f.srv.Close()
	}
	if serr := <-f.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// serveFloorChild is main for the re-executed floor child.
func serveFloorChild(upURL string) error {
	f, err := startFloor(upURL)
	if err != nil {
		return err
	}
	return serveAsChild(f.url, f.close)
}

// childFloor re-executes this program as a floor in front of upURL.
func childFloor(ctx context.Context, upURL string) (*selfChild, error) {
	return startSelfChild(ctx, "floor", floorEnv+"="+upURL)
}
