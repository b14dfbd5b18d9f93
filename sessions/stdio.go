package sessions

import (
	"context"
	"encoding/json"
	"io"

	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/door"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file is the host's half of the stdio door (door/stdio.go): the
// session of the one client that launched viewmux, and how it finishes
// when stdin ends or viewmux stops.

// ServeStdio serves one client reading messages from in and writing
// answers and notifications to out, one per line, bound to the view of
// profile ("" = server.default_profile), resolved without a token as
// `viewmux tools` resolves it. A line over server.max_body_bytes is answered
// with a JSON-RPC error and reading goes on.
//
// When in ends, or ctx is done, ServeStdio answers every request it has
// read, so that stopping drops no call: each gets server.shutdown_grace to
// finish with its result; the calls still running then are cancelled
// upstream and answered with a JSON-RPC error, as is every call read after
// ctx was done. Then it returns nil. An error that is not EOF reading in is
// returned. When a config reload removes the session's profile, the
// session ends at once (its calls are cancelled, unanswered) and
// ServeStdio returns an error naming the profile. A reader blocked on in when ctx ends is left behind unless in
// supports SetReadDeadline (a pipe on stdin usually does not); it ends
// with the process.
//
// It is meant to be called once per process, with in and out that nothing
// else uses.
func (s *Server) ServeStdio(ctx context.Context, profile string, in io.Reader, out io.Writer) error {
	return s.doors.ServeStdio(ctx, profile, in, out)
}

// Local makes and admits the stdio session (door.Host): bound to profile
// ("" = server.default_profile), resolved without a token as `viewmux
// tools` resolves it, writing through fw. The session outlives ctx, so
// that what was read is still answered. It is nil, with a nil error, when
// the session could not be admitted (the server is shutting down).
func (h doorHost) Local(ctx context.Context, profile string, fw door.FrameWriter) (door.Local, error) {
	s := h.s
	b, err := s.Resolver().ResolveLocal(grant.Selection{Profile: profile})
	if err != nil {
		return nil, err
	}
	ss := s.newStreamSession(context.WithoutCancel(ctx), doorStdio, b, fw)
	if err := s.admit(ss); err != nil {
		ss.Close(err)
		return nil, nil
	}
	return ss, nil
}

var _ door.Local = (*session)(nil)

// Refusal is the answer to a request read once viewmux began to stop
// (door.Local).
func (sess *session) Refusal(id json.RawMessage) []byte {
	return jsonrpc.ErrorResponse(id, shutdownError())
}

// Stop makes the new calls of ss fail, as shutdown does (door.Local).
func (sess *session) Stop() { sess.srv.flights.close(sess.ID()) }

// Release forgets the mark Stop left (door.Local).
func (sess *session) Release() { sess.srv.flights.forget(sess.ID()) }

// Finish is finishStdio (door.Local).
func (sess *session) Finish(cause error) { sess.srv.finishStdio(sess, cause) }

// finishStdio ends sess once the requests it has taken are answered: they
// get server.shutdown_grace to finish; then its calls still running are
// cancelled and answered with shutdownError, and its new calls refused,
// before it ends with cause. Nothing may hand sess new requests meanwhile.
func (s *Server) finishStdio(sess *session, cause error) {
	grace := s.cfg.Server.ShutdownGrace
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	sess.conn.Idle(gctx)
	late := gctx.Err() != nil
	cancel()
	if late {
		s.flights.close(sess.ID())
		n := s.flights.abort(sess.ID())
		s.log.Info("calls still running at the end of server.shutdown_grace are answered with an error", "session", sess.ID(), "calls", n, "duration", grace)
		actx, acancel := context.WithTimeout(context.Background(), answerWait)
		sess.conn.Idle(actx)
		acancel()
	}
	sess.End(cause)
}
