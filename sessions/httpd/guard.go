// Package httpd is the HTTP server viewmux's doors run in, and the checks
// every path shares before any of them looks at a request: the loopback
// Host rule and Origin (Guard), a deadline on request bodies
// (WithReadTimeout), a bound on headers (MaxHeaderBytes), a panic caught
// (RecoverPanics), and the server's lifecycle (Serve). It knows nothing of
// MCP beyond answering a refusal as a JSON-RPC error.
package httpd

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/internal/glob"
	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// MaxHeaderBytes bounds a request's header (http.Server.MaxHeaderBytes): a
// client may not make viewmux hold more for one request's narrowing, token
// and profile.
const MaxHeaderBytes = 64 << 10

// Guard runs the checks every path shares, before any of them looks at the
// request: the loopback Host rule against DNS rebinding, and
// Origin, which a request that carries one must be allowed (allowed
// reports whether r may come from origin). No path is exempt: not the /mcp
// fast paths, not /metrics or the health probes, which would otherwise
// tell a rebinding page what runs here.
func Guard(allowed func(r *http.Request, origin string) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(w, r) {
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !allowed(r, o) {
			refuse(w, fmt.Sprintf("origin %q is not allowed", o))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Origins reports whether origin matches one of globs: the allowed(r,
// origin) of Guard for server.allowed_origins.
func Origins(globs []*glob.Glob, origin string) bool {
	for _, g := range globs {
		if g.Match(origin) {
			return true
		}
	}
	return false
}

// refuse answers 403 with a JSON-RPC error saying why.
func refuse(w http.ResponseWriter, why string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	w.Write(jsonrpc.ErrorResponse(nil, &jsonrpc.Error{Code: mcp.INVALID_REQUEST, Message: why}))
}

// hostAllowed applies the DNS-rebinding rule: a request that reached a
// loopback address must name a loopback host. On failure it has answered
// 403.
func hostAllowed(w http.ResponseWriter, r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil {
		return true
	}
	if isLoopbackAddr(local) && !isLoopbackName(r.Host) {
		refuse(w, fmt.Sprintf("Host %q is not a loopback name", r.Host))
		return false
	}
	return true
}

// isLoopbackAddr reports whether a listener's address is a loopback one,
// without formatting a TCP address for every request.
func isLoopbackAddr(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return isLoopbackName(a.String())
}

// isLoopbackName reports whether hostport (with or without a port) is
// "localhost" or a loopback IP address.
func isLoopbackName(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// RecoverPanics is the outermost handler: a panic anywhere below answers
// 500 and is logged instead of killing the connection's goroutine
// silently. http.ErrAbortHandler, net/http's own way to abort a response,
// goes on up.
func RecoverPanics(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("panic in HTTP handler", "method", r.Method, "path", r.URL.Path, "panic", v)
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// WithReadTimeout bounds the time a request's body may take to arrive to d
// from the start of the request (server.read_timeout), so that a
// client trickling a body cannot hold a connection forever. It is a
// per-request read deadline, lifted once the body has been read to its
// end, rather than http.Server.ReadTimeout: that one also ends the
// connection's background read, which cancels long-lived responses (GET
// /mcp, /sse, listen streams) d after they start. A body that is still
// incomplete at the deadline fails to read, and the connection closes.
func WithReadTimeout(d time.Duration, next http.Handler) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the connection's read deadline when the body has been
// read to its end; a body that failed keeps it, so the connection closes.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
