package httpd

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Config is what Serve serves and how.
type Config struct {
	Handler http.Handler
	// ReadTimeout is server.read_timeout: the time a request's body may
	// take (WithReadTimeout), the idle time after which a keep-alive
	// connection closes, and at most the time its header may take
	// (otherwise 10s). 0 = none.
	ReadTimeout time.Duration
	// ShutdownGrace is how long Drain gets, once ctx is done, for the
	// calls in flight.
	ShutdownGrace time.Duration
	// Drain answers every call in flight within its ctx (the grace) and
	// ends the long-lived sessions; Serve calls it once ctx is done.
	Drain func(context.Context) error
	// CloseWait is how long, after Drain, the responses still open (long
	// streams that never finish on their own) get before their
	// connections are closed.
	CloseWait time.Duration
	// Log receives net/http's own errors, at warning level.
	Log *slog.Logger
}

// Serve serves HTTP on ln until ctx is done, then shuts down: it stops
// accepting, closes each keep-alive connection once it has answered,
// calls cfg.Drain with cfg.ShutdownGrace, closes the connections that
// never sent a request, and returns once the rest are closed, at most
// cfg.CloseWait later. The handler's requests see ctx without its
// cancellation: they end when Drain ends them, not when ctx does.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	headerTimeout := 10 * time.Second
	if cfg.ReadTimeout > 0 {
		headerTimeout = min(headerTimeout, cfg.ReadTimeout)
	}
	hs := &http.Server{
		// Bodies must arrive within read_timeout (a per-request deadline:
		// http.Server.ReadTimeout would cut long-lived streams), keep-alive
		// connections close after read_timeout idle, and headers, the
		// narrowing ones included, are refused past MaxHeaderBytes with 431
		// before any handler runs, so that no slow or oversized request
		// holds a connection or memory for long.
		Handler:           WithReadTimeout(cfg.ReadTimeout, cfg.Handler),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       cfg.ReadTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:          slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn),
	}
	ln = &closeOnce{Listener: ln}
	var fresh freshConns
	hs.ConnState = fresh.track
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Stop accepting, and close each keep-alive connection once it has
	// answered, but leave the requests and streams in flight alone:
	// http.Server.Shutdown would end the stream sessions at once (their
	// doors hook it), cutting their calls off without answers.
	ln.Close()
	hs.SetKeepAlivesEnabled(false)
	gctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	errs := []error{cfg.Drain(gctx)}
	// Every call is answered now; the handlers of /mcp requests write
	// their answers and return. Connections that never sent a request are
	// closed now; long-lived streams (GET /mcp, listens) never finish on
	// their own: they are closed after CloseWait.
	fresh.close()
	cctx, ccancel := context.WithTimeout(context.Background(), cfg.CloseWait)
	defer ccancel()
	if err := hs.Shutdown(cctx); err != nil {
		errs = append(errs, hs.Close())
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// closeOnce is a listener that closes once: Serve closes it before the
// http.Server does.
type closeOnce struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *closeOnce) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// freshConns is the HTTP connections that have not sent a request yet.
// http.Server.Shutdown counts such a connection as busy for its first five
// seconds (a client's spare connection may stay that way for good), so
// shutdown closes them itself once the calls are answered. Its track is an
// http.Server's ConnState hook. Its zero value is ready to use; it is safe
// for concurrent use.
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (f *freshConns) track(c net.Conn, state http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if state == http.StateNew {
		if f.conns == nil {
			f.conns = make(map[net.Conn]struct{})
		}
		f.conns[c] = struct{}{}
		return
	}
	delete(f.conns, c)
}

// close closes every connection that has not sent a request.
func (f *freshConns) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
		delete(f.conns, c)
	}
}
