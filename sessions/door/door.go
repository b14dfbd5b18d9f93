// Package door holds the message-stream front doors: /ws (websocket) and
// /sse with /message (legacy HTTP+SSE) of viewmux's HTTP server, and stdio
// (`viewmux serve --stdio`), with the bounded reading of one message they
// share (ReadMessage, ReadLine) and Conn, the wire half of a stream
// session (its one writer, its worker pool, its end). A door converts
// between its wire and JSON-RPC messages and nothing more: the Host behind
// it (package sessions) decides who may open a session, admits it, handles
// every message and says when the session ends. A door only maps that end
// onto its wire's way of closing.
package door

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// FrameWriter sends one complete JSON-RPC message to the client. A session
// calls it from one goroutine at a time; it must return within a bounded
// time (Config.WriteTimeout) even when the client stops reading.
type FrameWriter interface {
	WriteFrame(frame jsonrpc.Frame) error
}

// Causes a stream session can end with that come from its wire; a door
// maps them, and Config's, onto its wire's close.
var (
	// ErrClientGone: the client closed its connection.
	ErrClientGone = errors.New("client closed the connection")
	// ErrServerShutdown: the server is shutting down.
	ErrServerShutdown = errors.New("server shutting down")
	// ErrUnsupportedFrame: a websocket client sent a binary frame.
	ErrUnsupportedFrame = errors.New("binary frames are not supported: send JSON-RPC messages as UTF-8 text frames")
)

// Host is the server behind the doors. Its methods are called
// concurrently, one request's at a time.
type Host interface {
	// Admit checks the request r that would open a stream session, as
	// every door checks it (profile, narrowing, bearer token), and takes
	// the session's max_sessions slot. When it refuses, it has answered
	// r and reports false.
	Admit(w http.ResponseWriter, r *http.Request) (Admission, bool)
	// Post finds the live SSE session id that a POST r to /message names
	// and checks r against it (the token that opened it, the view it
	// asks for). When it refuses, it has answered r and reports false.
	Post(w http.ResponseWriter, r *http.Request, id string) (Stream, bool)
	// Local makes and admits the session of the one client that launched
	// viewmux (the stdio door), bound to profile ("" = the default) without
	// a token, writing through fw. It outlives ctx. It is nil, with a nil
	// error, when the session could not be admitted (the server is
	// shutting down).
	Local(ctx context.Context, profile string, fw FrameWriter) (Local, error)
}

// Admission is a stream session Host.Admit let in, whose wire is not up
// yet. Exactly one of Start and Cancel must be called.
type Admission interface {
	// Expiry is when the token the session is opened with stops being
	// accepted (its expiry plus the clock skew allowed); zero for none.
	Expiry() time.Time
	// Start makes the session of door kind, writing to its client
	// through fw, once the wire is up (a websocket's 101, an event
	// stream's headers). The session ends when ctx is done, at the
	// latest. On failure the session is closed, and its slot given back.
	Start(ctx context.Context, kind string, fw FrameWriter) (Stream, error)
	// Cancel gives back the slot of a session whose wire did not come up.
	Cancel()
}

// Stream is one live stream session, as a door sees it: what it reads goes
// to Receive, and it closes its wire once Done.
type Stream interface {
	// ID is the session's id.
	ID() string
	// Receive takes one message from the client; it reports false once
	// the session has ended. One goroutine at a time calls it.
	Receive(raw []byte) bool
	// Oversize records a message over Config.MaxMessageBytes (id is its
	// id when the door could find it, else nil) and returns the JSON-RPC
	// error to answer it with.
	Oversize(id json.RawMessage) []byte
	// Send queues a frame for the client, after what is queued already.
	Send(frame []byte)
	// End ends the session with cause; it does not wait. The first cause
	// wins.
	End(cause error)
	// Close ends the session and waits until what it queued is written.
	Close(cause error)
	// Wait waits until the session's workers and writer have stopped, or
	// ctx is done.
	Wait(ctx context.Context) error
	// Done is closed once the session has ended.
	Done() <-chan struct{}
	// Cause is why the session ended; nil while it runs.
	Cause() error
}

// Config configures the doors. Host is required.
type Config struct {
	Host Host
	// MaxMessageBytes bounds one message from a client
	// (server.max_body_bytes); a longer one is answered with an error and
	// the connection carries on.
	MaxMessageBytes int64
	// WriteTimeout bounds each write to a client.
	WriteTimeout time.Duration
	// Expired is the cause a session ends with when the token it was
	// opened with expires; Revoked wraps the cause of a session a config
	// reload ended. A websocket closes with a policy violation for both.
	Expired, Revoked error
	// AnswerWait bounds how long the stdio door waits for its session's
	// last answers to be written once it has finished.
	AnswerWait time.Duration
	// Log receives what the doors log; nil = discard.
	Log *slog.Logger
}

// Doors serves the stream doors of one host. Build it with New; its
// methods are HTTP handlers, safe for concurrent use.
type Doors struct {
	cfg Config
	log *slog.Logger
}

// New returns the doors of cfg.Host. It starts nothing.
func New(cfg Config) *Doors {
	d := &Doors{cfg: cfg, log: cfg.Log}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	return d
}

// writeJSONError answers with a JSON-RPC error message (id null).
func writeJSONError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(jsonrpc.ErrorResponse(nil, &jsonrpc.Error{Code: code, Message: msg}))
}
