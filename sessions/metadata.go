package sessions

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"

	"github.com/viewmux/viewmux/sessions/grant"
)

// protectedResource is the Protected Resource Metadata document (RFC 9728
// §2).
type protectedResource struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// serveMetadata serves Protected Resource Metadata at MetadataPath and
// every path under it (a client derives the document's URL from the URL
// it connects to: …/mcp, …/sse, …/ws, a profile's path). It needs no
// token; without [auth.oauth] it is 404.
func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) {
	o := s.Resolver().Config().Auth.OAuth
	if o == nil || r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.NotFound(w, r)
		return
	}
	doc := protectedResource{
		Resource:               o.Audience,
		AuthorizationServers:   []string{o.Issuer},
		BearerMethodsSupported: []string{"header"},
		ScopesSupported:        o.ScopesSupported,
		ResourceName:           "viewmux",
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Header().Set("Access-Control-Allow-Origin", "*") // public, and read by browser-based clients
	json.NewEncoder(w).Encode(doc)
}

// endExpired ends the /mcp session id when err refuses an expired access
// token of the subject that owns it: the client gets the 401, refreshes
// its token and initializes again. A token of another subject, or one
// that is not genuine, ends nothing.
func (s *Server) endExpired(id string, err error) {
	owner, ok := grant.ExpiredOwner(err)
	if !ok || id == "" {
		return
	}
	s.mu.Lock()
	sess := s.boundLocked(id)
	var b grant.Binding
	if sess != nil {
		b = sess.binding
	}
	s.mu.Unlock()
	if sess == nil || sess.conn != nil || subtle.ConstantTimeCompare(owner[:], sess.owner[:]) != 1 {
		return
	}
	s.log.Info("session ended", "session", id, "profile", b.Profile, "subject", b.Subject, "reason", "access token expired")
	s.unbind(id)
}
