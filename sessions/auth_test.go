package sessions

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/oauth/hydratest"
	"github.com/viewmux/viewmux/sessions/grant"
)

// The resource identifier the OAuth tests' tokens are minted for.
const testAudience = "http://mcp.test"

// oauthGrants are the grants of oauthServer's config: scope mcp:all grants
// all and readonly (admin), mcp:tools readonly only.
const oauthGrants = `[[auth.oauth.grants]]
claim = "scope"
value = "mcp:all"
profiles = ["all", "readonly"]
admin = true
[[auth.oauth.grants]]
claim = "scope"
value = "mcp:tools"
profiles = ["readonly"]
`

// oauthConfig is the config text after the upstream: [auth.oauth]
// trusting issuer, with grants, and a static token beside it.
func oauthConfig(issuer, grants string) string {
	return fmt.Sprintf(`[profiles.readonly]
read_only = true
[profiles.all]
[[auth.tokens]]
token = "tok-static"
profiles = ["all"]
[auth.oauth]
issuer = %q
audience = %q
clock_skew = "1s"
scopes_supported = ["mcp:tools", "mcp:all"]
`, issuer, testAudience) + grants
}

// oauthServer starts viewmux with oauthConfig(h's issuer, grants) and an
// audit log.
func oauthServer(t *testing.T, h *hydratest.Hydra, grants string) (*Server, *upstreamServer, *httptest.Server, *syncBuf) {
	t.Helper()
	up := newUpstreamServer(t, 6)
	audit := &syncBuf{}
	s := newServerWith(t, up.http.URL, oauthConfig(h.Issuer, grants), Options{Audit: audit})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, up, hs, audit
}

// mcpPost sends one message to /mcp with token and session.
func mcpPost(t *testing.T, hs *httptest.Server, path, token, session, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

// mcpInit opens a /mcp session with token and returns its id.
func mcpInit(t *testing.T, hs *httptest.Server, path, token string) string {
	t.Helper()
	resp, body := mcpPost(t, hs, path, token, "", initializeBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	return resp.Header.Get("Mcp-Session-Id")
}

const listBody = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`

// TestOAuthResourceServer runs the resource server's doors against tokens
// of a real OpenID provider.
func TestOAuthResourceServer(t *testing.T) {
	h := hydratest.Start(t, 0)
	id, secret := h.Client(t, "mcp:tools mcp:all other", testAudience, "http://elsewhere.test")
	id2, secret2 := h.Client(t, "mcp:tools mcp:all", testAudience)
	// A grant by another claim: this client's id gives profile all.
	id3, secret3 := h.Client(t, "other", testAudience)
	_, _, hs, audit := oauthServer(t, h, oauthGrants+fmt.Sprintf("[[auth.oauth.grants]]\nclaim = \"client_id\"\nvalue = %q\nprofiles = [\"all\"]\n", id3))
	tools := h.Token(t, id, secret, "mcp:tools", testAudience)
	all := h.Token(t, id, secret, "mcp:all", testAudience)
	metadata := testAudience + grant.MetadataPath

	t.Run("protected resource metadata", func(t *testing.T) {
		for _, path := range []string{grant.MetadataPath, grant.MetadataPath + "/mcp", grant.MetadataPath + "/sse", grant.MetadataPath + "/ws"} {
			code, hdr, body := getStatus(t, hs.URL+path, nil)
			if code != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
				t.Fatalf("GET %s: %d %s", path, code, body)
			}
			var doc map[string]any
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"resource": testAudience, "authorization_servers": []any{h.Issuer},
				"bearer_methods_supported": []any{"header"}, "scopes_supported": []any{"mcp:tools", "mcp:all"}}
			for k, v := range want {
				if got, _ := json.Marshal(doc[k]); string(got) != mustJSON(v) {
					t.Errorf("GET %s: %s = %s, want %s", path, k, got, mustJSON(v))
				}
			}
		}
	})

	t.Run("401 on every door", func(t *testing.T) {
		wrongAud := h.Token(t, id, secret, "mcp:tools", "http://elsewhere.test")
		for _, tt := range []struct {
			name, token, wantErr string
		}{
			{"no token", "", ""},
			{"garbage", "not-a-token", `error="invalid_token"`},
			{"wrong audience", wrongAud, `error="invalid_token"`},
			{"alg none", forgeNone(tools), `error="invalid_token"`},
		} {
			for _, door := range []string{"/mcp", "/sse", "/ws"} {
				method := http.MethodGet
				if door == "/mcp" {
					method = http.MethodPost
				}
				req, _ := http.NewRequest(method, hs.URL+door, strings.NewReader(initializeBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				if tt.token != "" {
					req.Header.Set("Authorization", "Bearer "+tt.token)
				}
				resp, err := hs.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got := resp.Header.Get("WWW-Authenticate")
				if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(got, "Bearer ") ||
					!strings.Contains(got, `resource_metadata="`+metadata+`"`) || !strings.Contains(got, tt.wantErr) {
					t.Errorf("%s %s: %d WWW-Authenticate %q, want 401 naming %s and %q", tt.name, door, resp.StatusCode, got, metadata, tt.wantErr)
				}
				if tt.token == "" && strings.Contains(got, "error=") {
					t.Errorf("%s %s: a request with no token got an error code: %q (RFC 6750 §3.1)", tt.name, door, got)
				}
			}
		}
	})

	t.Run("grants to profiles on /mcp", func(t *testing.T) {
		sid := mcpInit(t, hs, "/mcp", tools)
		_, body := mcpPost(t, hs, "/mcp", tools, sid, listBody)
		if !strings.Contains(body, "up__tool_0000") || strings.Contains(body, "up__tool_0001") {
			t.Errorf("mcp:tools got more or less than readonly: %s", body)
		}
		resp, body := mcpPost(t, hs, "/mcp/p/all", tools, "", initializeBody)
		got := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(got, `error="insufficient_scope"`) || !strings.Contains(got, `scope="mcp:all"`) ||
			!strings.Contains(got, "profile all") {
			t.Errorf("profile all with mcp:tools: %d %q %s, want 403 insufficient_scope naming scope mcp:all and the profile", resp.StatusCode, got, body)
		}
		sid = mcpInit(t, hs, "/mcp/p/all", all)
		_, body = mcpPost(t, hs, "/mcp", all, sid, listBody)
		if !strings.Contains(body, "up__tool_0001") {
			t.Errorf("mcp:all on profile all: %s", body)
		}
	})

	t.Run("grant by client_id", func(t *testing.T) {
		tok := h.Token(t, id3, secret3, "other", testAudience)
		sid := mcpInit(t, hs, "/mcp", tok)
		if _, body := mcpPost(t, hs, "/mcp", tok, sid, listBody); !strings.Contains(body, "up__tool_0001") {
			t.Errorf("client_id grant's default profile all: %s", body)
		}
	})

	t.Run("no grant matches", func(t *testing.T) {
		resp, body := mcpPost(t, hs, "/mcp", h.Token(t, id, secret, "other", testAudience), "", initializeBody)
		if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusForbidden || !strings.Contains(got, `error="insufficient_scope"`) {
			t.Errorf("no grant: %d %q %s", resp.StatusCode, got, body)
		}
	})

	t.Run("sse and ws", func(t *testing.T) {
		p := mustOpenSSE(t, hs, "", http.Header{"Authorization": {"Bearer " + tools}})
		initializeAs(t, p, map[string]any{})
		if got := strings.Join(toolNames(t, p, 2), ","); got != "up__tool_0000,up__tool_0002,up__tool_0004" {
			t.Errorf("SSE view = %s", got)
		}
		// A refreshed token of the same subject keeps posting to it; another
		// subject's token and a static token are refused.
		ping := `{"jsonrpc":"2.0","id":9,"method":"ping"}`
		if code, body := p.post(t, p.endpoint, ping, http.Header{"Authorization": {"Bearer " + h.Token(t, id, secret, "mcp:tools", testAudience)}}); code != http.StatusAccepted {
			t.Errorf("POST with a new token of the same subject: %d %s", code, body)
		}
		for name, tok := range map[string]string{"another subject": h.Token(t, id2, secret2, "mcp:tools", testAudience), "a static token": "tok-static"} {
			code, body := p.post(t, p.endpoint, ping, http.Header{"Authorization": {"Bearer " + tok}})
			if code != http.StatusForbidden && code != http.StatusNotFound {
				t.Errorf("POST with %s: %d %s, want refused", name, code, body)
			}
		}

		w := dialWSPeer(t, hs, "", http.Header{"Authorization": {"Bearer " + all}})
		initializeAs(t, w, map[string]any{})
		if got := len(toolNames(t, w, 2)); got != 6 {
			t.Errorf("ws view with mcp:all has %d tools, want 6", got)
		}
	})

	t.Run("a session belongs to its subject", func(t *testing.T) {
		sid := mcpInit(t, hs, "/mcp", tools)
		// A refreshed token of the same subject: the same session.
		if resp, body := mcpPost(t, hs, "/mcp", h.Token(t, id, secret, "mcp:tools", testAudience), sid, listBody); resp.StatusCode != http.StatusOK {
			t.Errorf("same subject, new token: %d %s", resp.StatusCode, body)
		}
		for name, tok := range map[string]string{"another subject": h.Token(t, id2, secret2, "mcp:tools", testAudience), "a static token": "tok-static"} {
			if resp, body := mcpPost(t, hs, "/mcp", tok, sid, listBody); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "up__tool") {
				t.Errorf("%s on an OAuth session: %d %s, want 404", name, resp.StatusCode, body)
			}
		}
		static := mcpInit(t, hs, "/mcp", "tok-static")
		if resp, body := mcpPost(t, hs, "/mcp", all, static, listBody); resp.StatusCode != http.StatusNotFound {
			t.Errorf("an OAuth token on a static token's session: %d %s, want 404", resp.StatusCode, body)
		}
	})

	t.Run("audit names the subject, never the token", func(t *testing.T) {
		sid := mcpInit(t, hs, "/mcp", tools)
		mcpPost(t, hs, "/mcp", tools, sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__tool_0000","arguments":{"query":"x"}}}`)
		audit.mu.Lock()
		log := audit.b.String()
		audit.mu.Unlock()
		if !strings.Contains(log, `"caller":"oauth:`+id+`"`) {
			t.Errorf("audit log does not name caller oauth:%s:\n%s", id, log)
		}
		if strings.Contains(log, tools[:40]) || strings.Contains(log, "tok-static") {
			t.Errorf("audit log holds a token:\n%s", log)
		}
	})

	t.Run("status page for an admin grant", func(t *testing.T) {
		code, _, body := getStatus(t, hs.URL+"/status.json", http.Header{"Authorization": {"Bearer " + all}})
		if code != http.StatusOK || !strings.Contains(body, "bench.toml") {
			t.Errorf("status.json with an admin grant: %d", code)
		}
		var st struct {
			BySubject map[string]int `json:"sessions_by_subject"`
		}
		json.Unmarshal([]byte(body), &st)
		if st.BySubject[id] == 0 || st.BySubject[grant.StaticSubject(sha256.Sum256([]byte("tok-static")))] == 0 {
			t.Errorf("status.json sessions by subject = %v, want %s and the static token's", st.BySubject, id)
		}
		if strings.Contains(body, all[:40]) || strings.Contains(body, "tok-static") {
			t.Errorf("status.json holds a token")
		}
		code, _, page := getStatus(t, hs.URL+"/", http.Header{"Authorization": {"Bearer " + all}})
		if code != http.StatusOK || !strings.Contains(page, id) {
			t.Errorf("status page for an admin does not name subject %s: %d", id, code)
		}
		code, _, body = getStatus(t, hs.URL+"/status.json", http.Header{"Authorization": {"Bearer " + tools}})
		if code != http.StatusOK || strings.Contains(body, "sessions_by_subject") {
			t.Errorf("status.json for a grant that is not admin shows other callers: %d %s", code, body)
		}
		code, hdr, _ := getStatus(t, hs.URL+"/status.json", nil)
		if code != http.StatusUnauthorized || !strings.Contains(hdr.Get("WWW-Authenticate"), metadata) {
			t.Errorf("status.json without a token: %d %q", code, hdr.Get("WWW-Authenticate"))
		}
	})
}

// TestOAuthExpiryMidSession: a token that expires ends its session at the
// session's next request, which gets 401 with the metadata; a fresh token
// then needs a new session. A GET stream and a websocket opened with it
// end at its expiry, without waiting for a request.
func TestOAuthExpiryMidSession(t *testing.T) {
	h := hydratest.Start(t, 0)
	id, secret := h.Client(t, "mcp:tools", testAudience)
	_, _, hs, _ := oauthServer(t, h, oauthGrants)
	// The first token makes hydra generate its keys, which takes a while;
	// the short-lived one is minted after.
	mcpInit(t, hs, "/mcp", h.Token(t, id, secret, "mcp:tools", testAudience))
	h.SetLifespan(t, id, 5*time.Second)
	short := h.Token(t, id, secret, "mcp:tools", testAudience)
	sid := mcpInit(t, hs, "/mcp", short)
	w := dialWSPeer(t, hs, "", http.Header{"Authorization": {"Bearer " + short}})
	initializeAs(t, w, map[string]any{})
	p := mustOpenSSE(t, hs, "", http.Header{"Authorization": {"Bearer " + short}})
	initializeAs(t, p, map[string]any{})
	// The session's GET stream, opened with the short token, ends when it
	// expires: what the session is told after that needs a fresh token.
	getReq, _ := http.NewRequest(http.MethodGet, hs.URL+"/mcp", nil)
	getReq.Header.Set("Authorization", "Bearer "+short)
	getReq.Header.Set("Accept", "text/event-stream")
	getReq.Header.Set(mcp.HeaderSessionID, sid)
	getReq.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	getResp, err := hs.Client().Do(getReq)
	if err != nil || getResp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %v %v", err, getResp)
	}
	getEnded := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, getResp.Body)
		getEnded <- err
	}()
	exp := tokenExpiry(t, short)
	// Past exp and the 1 s skew: no timing is asserted, the test only
	// waits until the token is surely expired.
	time.Sleep(time.Until(exp.Add(1500 * time.Millisecond)))
	// Before any request that would end the session: the stream ends on
	// its own.
	select {
	case err := <-getEnded:
		if err != nil {
			t.Errorf("GET stream after expiry: %v, want its end", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the GET stream opened with the expired token is still open")
	}

	resp, body := mcpPost(t, hs, "/mcp", short, sid, listBody)
	got := resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(got, `error="invalid_token"`) || !strings.Contains(got, testAudience+grant.MetadataPath) {
		t.Fatalf("expired token: %d %q %s", resp.StatusCode, got, body)
	}
	fresh := h.Token(t, id, secret, "mcp:tools", testAudience)
	if resp, body := mcpPost(t, hs, "/mcp", fresh, sid, listBody); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the expired session with a fresh token: %d %s, want 404 (ended)", resp.StatusCode, body)
	}
	mcpInit(t, hs, "/mcp", fresh)

	ping := `{"jsonrpc":"2.0","id":9,"method":"ping"}`
	if code, body := p.post(t, p.endpoint, ping, http.Header{"Authorization": {"Bearer " + short}}); code != http.StatusUnauthorized {
		t.Errorf("SSE post with the expired token: %d %s, want 401", code, body)
	}
	if code, body := p.post(t, p.endpoint, ping, http.Header{"Authorization": {"Bearer " + fresh}}); code != http.StatusNotFound {
		t.Errorf("SSE post with a fresh token to the expired stream: %d %s, want 404 (ended)", code, body)
	}

	// The websocket is closed at the expiry, without waiting for the
	// client's next message: nothing is written to it here.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = w.c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation || !strings.Contains(err.Error(), "expired") {
		t.Errorf("websocket after expiry: %v, want closed 1008 naming the expiry", err)
	}
}

func tokenExpiry(t *testing.T, tok string) time.Time {
	t.Helper()
	var claims struct {
		Exp int64 `json:"exp"`
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err != nil || json.Unmarshal(raw, &claims) != nil || claims.Exp == 0 {
		t.Fatalf("token has no exp: %v", err)
	}
	return time.Unix(claims.Exp, 0)
}

// forgeNone re-signs tok's claims with alg none.
func forgeNone(tok string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + strings.Split(tok, ".")[1] + "."
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestOAuthReload: a reload matches an OAuth session's claims against the
// new grants: a session whose profile the new grant no longer allows
// ends, one it still allows goes on.
func TestOAuthReload(t *testing.T) {
	h := hydratest.Start(t, 0)
	id, secret := h.Client(t, "mcp:tools mcp:all", testAudience)
	s, up, hs, _ := oauthServer(t, h, oauthGrants)
	all := h.Token(t, id, secret, "mcp:all", testAudience)
	onAll := mcpInit(t, hs, "/mcp/p/all", all)
	onRO := mcpInit(t, hs, "/mcp/p/readonly", all)

	narrower := strings.Replace(oauthGrants, `profiles = ["all", "readonly"]`, `profiles = ["readonly"]`, 1)
	cfg, err := configs.Parse("reload.toml", []byte(fmt.Sprintf("[upstreams.up]\nurl = %q\n%s", up.http.URL, oauthConfig(h.Issuer, narrower))), nil)
	if err != nil {
		t.Fatal(err)
	}
	before := s.Resolver().Validator()
	if err := s.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if s.Resolver().Validator() != before {
		t.Errorf("a reload that changed only grants dropped the cached keys")
	}
	if resp, body := mcpPost(t, hs, "/mcp", all, onAll, listBody); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a session on profile all after its grant lost it: %d %s, want 404", resp.StatusCode, body)
	}
	if resp, body := mcpPost(t, hs, "/mcp", all, onRO, listBody); resp.StatusCode != http.StatusOK || !strings.Contains(body, "up__tool_0000") {
		t.Errorf("a session on readonly, still granted: %d %s", resp.StatusCode, body)
	}
}
