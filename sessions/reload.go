package sessions

import (
	"errors"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file holds what a config reload does to live sessions
// (docs/operations.md, Reload): a reload can only narrow a live session or
// end it. Each session's grant is re-derived from its own caller (the
// token that opened it) and its own profile, never from a default that
// changed since; a session whose token is gone or no longer allows its
// profile, or whose profile is gone, ends on every door. Every live session
// is covered: the one registry holds those of every door, initialized or
// not (a stream door's is there from its connection); and so are
// 2026-07-28 listen streams. A /mcp session's GET stream closes with its
// session.

// errConfigChanged is why a reload ended a session; the error a session
// ends with wraps it and says what changed.
var errConfigChanged = errors.New("the config changed")

// Reload applies a new config's [filter], profiles and tokens. Each live
// session's grant is re-derived (Resolver.Regrant): it stays, never wider
// than before, and is told list_changed if its view changed; or it ends
// (see the comment at the top of this file). Settings under [server]
// (listen address, origins, limits) take effect only on restart.
func (s *Server) Reload(cfg *configs.Config) error {
	res, err := grant.NewResolver(cfg, s.registry)
	if err != nil {
		return err
	}
	res.KeepValidator(s.Resolver())
	s.reloading.Lock()
	defer s.reloading.Unlock()
	s.registry.Forget()
	// Stored before s.mu is taken below: a session that binds or speaks
	// after the loop sees the new resolver and re-derives its grant itself
	// (bind, grantOf).
	s.resolver.Store(res)
	snap := s.agg.Snapshot()

	type ending struct {
		id, profile string
		stream      bool
		cause       error
	}
	var ends []ending
	s.mu.Lock()
	var notify, prompts, resources []string
	for id, sess := range s.sessions {
		if sess.revoked != nil {
			continue
		}
		if !sess.bound {
			// A stream session that has not initialized: nothing to tell
			// it yet. grantLocked re-derives its grant; a session that
			// connects while this runs does so itself on its first
			// message.
			if _, err := s.grantLocked(sess); err != nil {
				ends = append(ends, ending{id: id, profile: sess.binding.Profile, stream: true, cause: err})
			}
			continue
		}
		b, err := s.regrant(res, sess.binding)
		if err != nil {
			// Refused from now on (serveMCP, grantOf), ended below.
			sess.revoked = fmt.Errorf("%w: %w", errConfigChanged, err)
			sess.inflight.cancelAll()
			ends = append(ends, ending{id: id, profile: sess.binding.Profile, stream: sess.conn != nil, cause: sess.revoked})
			continue
		}
		sess.binding = b
		v := s.registry.View(snap.Version, snap.Tools, s.effective(b))
		if fp := v.Fingerprint(); fp != sess.listed {
			sess.listed = fp
			notify = append(notify, id)
		}
		// upstreams and deny_upstreams may have changed what it lists.
		p, r := v.Listing(snap.Catalog).Fingerprints()
		if p != sess.listedPrompts {
			sess.listedPrompts = p
			prompts = append(prompts, id)
		}
		if r != sess.listedResources {
			sess.listedResources = r
			resources = append(resources, id)
		}
	}
	s.mu.Unlock()
	for _, e := range ends {
		s.endSession(e.id, e.profile, e.stream, e.cause)
	}
	s.reloadListeners(res)
	s.notify(notify, string(mcp.MethodNotificationToolsListChanged), nil)
	s.notify(prompts, string(mcp.MethodNotificationPromptsListChanged), nil)
	s.notify(resources, string(mcp.MethodNotificationResourcesListChanged), nil)
	return nil
}

// grantOf returns the binding sess is served with now, or, wrapping
// errConfigChanged, why a reload ended it. Once sess has bound, that is
// the binding the server keeps for it (which a reload or an enabled
// toolset may have replaced); before (a stream session that has not
// initialized), the one it connected with, re-derived first when a reload
// came since.
func (s *Server) grantOf(sess *session) (grant.Binding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grantLocked(sess)
}

// grantLocked is grantOf with s.mu held.
func (s *Server) grantLocked(sess *session) (grant.Binding, error) {
	if sess.revoked != nil {
		return grant.Binding{}, sess.revoked
	}
	if res := s.Resolver(); !sess.bound && sess.binding.Granter != nil && sess.binding.Granter != res {
		nb, err := s.regrant(res, sess.binding)
		if err != nil {
			sess.revoked = fmt.Errorf("%w: %w", errConfigChanged, err)
			return grant.Binding{}, sess.revoked
		}
		sess.binding = nb
	}
	return sess.binding, nil
}

// regrant re-derives b under res (Resolver.Regrant), with the toolsets a
// dynamic session had on enabled again where they still exist.
func (s *Server) regrant(res *grant.Resolver, b grant.Binding) (grant.Binding, error) {
	nb, err := res.Regrant(b)
	if err != nil {
		return grant.Binding{}, err
	}
	nb.Who = b.Who // the same caller: its shares stay where they were taken
	return s.refind(s.reenable(nb, b.Filter), b.Filter), nil
}

// endSession ends the session id, which a reload ended with cause: a
// stream session closes its connection; a /mcp session is closed as a
// DELETE would close it, so that its id answers 404 from now on and its
// GET stream ends.
func (s *Server) endSession(id, profile string, stream bool, cause error) {
	if stream {
		if ss := s.stream(id); ss != nil {
			ss.End(cause) // logged by end
		}
		return
	}
	s.log.Warn("session ended", "session", id, "profile", profile, "reason", cause.Error())
	s.expire(id)
}

// reloadListeners re-derives the grant of every open listen stream under
// res, and closes those whose grant no longer holds.
func (s *Server) reloadListeners(res *grant.Resolver) {
	s.listening.each(func(l *listener) {
		b, err := s.regrant(res, l.binding)
		if err != nil {
			s.log.Info("listen stream closed", "profile", l.binding.Profile, "reason", fmt.Errorf("%w: %w", errConfigChanged, err).Error())
			l.close()
			return
		}
		l.binding = b
	})
}
