// Package oauthtest runs a small OAuth 2.1 authorization server and a
// protected resource on loopback listeners, for tests of viewmux's OAuth
// client: the authorization server approves every request by itself
// (its authorization endpoint redirects straight back with a code), like
// the conformance suite's.
package oauthtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Server is one authorization server and one protected resource (an MCP
// endpoint at /mcp). Its fields are read and changed under Lock.
type Server struct {
	AS, RS *httptest.Server

	mu sync.Mutex
	// ExpiresIn is the lifetime of the access tokens issued, in seconds;
	// 0 = 3600.
	ExpiresIn int
	// Scopes is what the 401 challenge names.
	Scopes []string
	// ToolScope, when set, is the scope a tools/call needs (403
	// insufficient_scope otherwise).
	ToolScope string
	// ListScope, when set, is the scope a tools/list needs (403
	// insufficient_scope otherwise): a catalog refused for scope.
	ListScope string
	// OpenInitialize lets an initialize through without a token (the
	// 401 challenge then comes only from the requests after it).
	OpenInitialize bool
	// NeverGrant is a scope the authorization server never grants.
	NeverGrant string
	// TokenDown makes the token endpoint answer 503.
	TokenDown bool
	// Registered counts the dynamic client registrations.
	Registered int
	// NoRevocation leaves revocation_endpoint out of the metadata.
	NoRevocation bool
	// RevokeForms are the forms of every revocation request, in order
	// (RFC 7009: each token revoked is invalid from then on).
	RevokeForms []url.Values
	// LastUnauthenticated is the header of the last request that reached
	// /mcp without a valid token.
	LastUnauthenticated http.Header
	access              map[string][]string // valid access tokens → scopes
	refresh             map[string][]string // valid refresh tokens → scopes
	subject             map[string]string   // access and refresh tokens → the subject they were issued to
	n                   int
	// Calls are the tools/call requests the resource let through, in
	// order: the subject and the access token of each.
	Calls []Call
	// TokenForms are the forms of every token request, in order.
	TokenForms []url.Values
	// Authorized counts the requests the resource let through.
	Authorized int
	// Unauthenticated counts the requests that reached /mcp without a
	// valid token.
	Unauthenticated int
}

// Call is one tools/call the resource let through.
type Call struct {
	Subject, Token string
}

// LoginAsParam is the query parameter a test adds to an authorization
// URL to log in as a subject of its choosing (a person would type their
// credentials there); without it the subject is "".
const LoginAsParam = "login_as"

// New starts a Server whose resource serves mcp (with bearer checks).
func New(t testing.TB, mcp http.Handler) *Server {
	s := &Server{access: map[string][]string{}, refresh: map[string][]string{}, subject: map[string]string{}, Scopes: []string{"mcp:tools"}}
	s.AS = httptest.NewServer(http.HandlerFunc(s.serveAS))
	s.RS = httptest.NewServer(s.resource(mcp))
	t.Cleanup(func() { s.AS.Close(); s.RS.Close() })
	return s
}

// URL is the MCP endpoint.
func (s *Server) URL() string { return s.RS.URL + "/mcp" }

// Lock and Unlock guard the fields.
func (s *Server) Lock()   { s.mu.Lock() }
func (s *Server) Unlock() { s.mu.Unlock() }

// SubjectOf returns the subject the token tok was issued to, and whether
// it is a valid access token.
func (s *Server) SubjectOf(tok string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.access[tok]
	return s.subject[tok], ok
}

// Issue makes tok a valid access token of subject sub (with the scopes
// the challenge names), as another issuer's token exchange would.
func (s *Server) Issue(tok, sub string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.access[tok] = s.Scopes
	s.subject[tok] = sub
}

// RevokeAccess makes every access token issued so far invalid (refresh
// tokens stay valid).
func (s *Server) RevokeAccess() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.access)
}

// RevokeAll makes every token invalid.
func (s *Server) RevokeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.access)
	clear(s.refresh)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (s *Server) serveAS(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/.well-known/oauth-authorization-server":
		s.mu.Lock()
		revocation := s.AS.URL + "/revoke"
		if s.NoRevocation {
			revocation = ""
		}
		s.mu.Unlock()
		writeJSON(w, 200, map[string]any{
			"revocation_endpoint":                            revocation,
			"issuer":                                         s.AS.URL,
			"authorization_endpoint":                         s.AS.URL + "/authorize",
			"token_endpoint":                                 s.AS.URL + "/token",
			"registration_endpoint":                          s.AS.URL + "/register",
			"response_types_supported":                       []string{"code"},
			"grant_types_supported":                          []string{"authorization_code", "refresh_token"},
			"code_challenge_methods_supported":               []string{"S256"},
			"token_endpoint_auth_methods_supported":          []string{"none"},
			"authorization_response_iss_parameter_supported": true,
		})
	case "/revoke":
		r.ParseForm()
		s.mu.Lock()
		s.RevokeForms = append(s.RevokeForms, r.PostForm)
		delete(s.access, r.PostForm.Get("token"))
		delete(s.refresh, r.PostForm.Get("token"))
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	case "/register":
		s.mu.Lock()
		s.Registered++
		s.mu.Unlock()
		writeJSON(w, 201, map[string]any{"client_id": "test-client", "token_endpoint_auth_method": "none"})
	case "/authorize":
		q := r.URL.Query()
		cb, err := url.Parse(q.Get("redirect_uri"))
		if err != nil || q.Get("code_challenge_method") != "S256" {
			http.Error(w, "bad request", 400)
			return
		}
		v := cb.Query()
		code := "code:" + q.Get("scope")
		if as := q.Get(LoginAsParam); as != "" {
			code += "#sub=" + as
		}
		v.Set("code", code)
		v.Set("state", q.Get("state"))
		v.Set("iss", s.AS.URL)
		cb.RawQuery = v.Encode()
		http.Redirect(w, r, cb.String(), http.StatusFound)
	case "/token":
		r.ParseForm()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.TokenForms = append(s.TokenForms, r.PostForm)
		if s.TokenDown {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		var scopes []string
		var sub string
		switch r.PostForm.Get("grant_type") {
		case "authorization_code":
			code, ok := strings.CutPrefix(r.PostForm.Get("code"), "code:")
			if !ok || r.PostForm.Get("code_verifier") == "" {
				writeJSON(w, 400, map[string]string{"error": "invalid_grant"})
				return
			}
			code, sub, _ = strings.Cut(code, "#sub=")
			for _, sc := range strings.Fields(code) {
				if sc != s.NeverGrant {
					scopes = append(scopes, sc)
				}
			}
		case "refresh_token":
			sc, ok := s.refresh[r.PostForm.Get("refresh_token")]
			if !ok {
				writeJSON(w, 400, map[string]string{"error": "invalid_grant", "error_description": "unknown refresh token " + r.PostForm.Get("refresh_token")})
				return
			}
			sub = s.subject[r.PostForm.Get("refresh_token")]
			delete(s.refresh, r.PostForm.Get("refresh_token"))
			scopes = sc
		default:
			writeJSON(w, 400, map[string]string{"error": "unsupported_grant_type"})
			return
		}
		s.n++
		at, rt := fmt.Sprintf("access-token-%04d-secret", s.n), fmt.Sprintf("refresh-token-%04d-secret", s.n)
		s.access[at], s.refresh[rt] = scopes, scopes
		s.subject[at], s.subject[rt] = sub, sub
		exp := s.ExpiresIn
		if exp == 0 {
			exp = 3600
		}
		writeJSON(w, 200, map[string]any{"access_token": at, "refresh_token": rt, "token_type": "Bearer", "expires_in": exp, "scope": strings.Join(scopes, " ")})
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) resource(mcp http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every path is a resource of its own (/mcp, a legacy /sse …),
		// with its metadata at the path-specific well-known URL.
		const wellKnown = "/.well-known/oauth-protected-resource"
		prm := s.RS.URL + wellKnown + r.URL.Path
		if p, ok := strings.CutPrefix(r.URL.Path, wellKnown+"/"); ok {
			writeJSON(w, 200, map[string]any{"resource": s.RS.URL + "/" + p, "authorization_servers": []string{s.AS.URL}})
			return
		}
		s.mu.Lock()
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		scopes, ok := s.access[tok]
		if !ok && s.OpenInitialize && r.Method == http.MethodPost {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(bytes.NewReader(body))
			if strings.Contains(string(body), `"initialize"`) {
				s.mu.Unlock()
				mcp.ServeHTTP(w, r)
				return
			}
		}
		if !ok {
			s.Unauthenticated++
			s.LastUnauthenticated = r.Header.Clone()
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata="%s", scope="%s"`, prm, strings.Join(s.Scopes, " ")))
			s.mu.Unlock()
			writeJSON(w, 401, map[string]string{"error": "invalid_token"})
			return
		}
		need, needList := s.ToolScope, s.ListScope
		s.mu.Unlock()
		if (need != "" || needList != "") && r.Method == http.MethodPost {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(bytes.NewReader(body))
			switch {
			case need != "" && !slices.Contains(scopes, need) && strings.Contains(string(body), `"tools/call"`):
			case needList != "" && !slices.Contains(scopes, needList) && strings.Contains(string(body), `"tools/list"`):
				need = needList
			default:
				need = ""
			}
			if need != "" {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope="%s", resource_metadata="%s"`, need, prm))
				writeJSON(w, 403, map[string]string{"error": "insufficient_scope"})
				return
			}
		}
		if r.Method == http.MethodPost && r.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(bytes.NewReader(body))
			if strings.Contains(string(body), `"tools/call"`) {
				s.mu.Lock()
				s.Calls = append(s.Calls, Call{Subject: s.subject[tok], Token: tok})
				s.mu.Unlock()
			}
		}
		s.mu.Lock()
		s.Authorized++
		s.mu.Unlock()
		mcp.ServeHTTP(w, r)
	})
}
