package sessions

import (
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/configs"
)

// Reload applies a new config's [filter], profiles and tokens. Every live
// session stays connected: it is resolved again from what it originally
// asked for, and told tools/list_changed if its view changed. A session
// whose profile no longer exists keeps its old rules (and is logged).
// Settings under [server] (listen address, origins, limits) take effect only
// on restart.
func (s *Server) Reload(cfg *configs.Config) error {
	res, err := NewResolver(cfg, s.registry)
	if err != nil {
		return err
	}
	s.registry.Forget()
	s.resolver.Store(res)
	snap := s.agg.Snapshot()

	s.mu.Lock()
	var notify, prompts, resources []string
	for id, sess := range s.bound {
		b, err := res.ResolveLocal(sess.binding.Selection)
		if err != nil {
			s.log.Warn("session keeps its previous rules after reload", "session", id, "profile", sess.binding.Profile, "error", err)
			continue
		}
		b = s.reenable(b, sess.binding.Filter) // a dynamic session keeps its toolsets (dynamic.go)
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
	s.notify(notify, string(mcp.MethodNotificationToolsListChanged), nil)
	s.notify(prompts, string(mcp.MethodNotificationPromptsListChanged), nil)
	s.notify(resources, string(mcp.MethodNotificationResourcesListChanged), nil)
	return nil
}
