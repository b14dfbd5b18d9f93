// Package hydratest runs a real OpenID provider, Ory Hydra v2, on loopback
// ports for tests: an in-memory database, JWT access tokens, clients with
// the client_credentials grant. The hydra binary is found on $HYDRA, on
// PATH, or in the repository's bin/ci-tools (where .ci/run builds it).
// Without it a test is skipped, and with CI=true it fails.
package hydratest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hydra is one running hydra serve all. Its fields are read-only.
type Hydra struct {
	// Issuer is the issuer of its tokens, its public URL without a
	// trailing slash, e.g. http://127.0.0.1:41234.
	Issuer string
	// Admin is its admin API's URL.
	Admin string
}

// Binary returns the path of the hydra binary, skipping t (failing it
// with CI=true) when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HYDRA"); p != "" {
		return p
	}
	if p, err := exec.LookPath("hydra"); err == nil {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "..", "bin", "ci-tools", "hydra")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	msg := "hydra (github.com/ory/hydra/v2 v2.3.0) is not installed: run .ci/run, or set $HYDRA to its binary"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Start runs hydra until t ends. The ports are loopback ports free when
// it starts. The access token lifespan is accessTTL (0: one hour).
func Start(t testing.TB, accessTTL time.Duration) *Hydra {
	t.Helper()
	bin := Binary(t)
	if accessTTL == 0 {
		accessTTL = time.Hour
	}
	pub, adm := freePort(t), freePort(t)
	h := &Hydra{Issuer: fmt.Sprintf("http://127.0.0.1:%d", pub), Admin: fmt.Sprintf("http://127.0.0.1:%d", adm)}
	cmd := exec.Command(bin, "serve", "all", "--dev", "--sqa-opt-out")
	cmd.Env = append(os.Environ(),
		"DSN=memory",
		"URLS_SELF_ISSUER="+h.Issuer,
		"SERVE_PUBLIC_HOST=127.0.0.1", fmt.Sprintf("SERVE_PUBLIC_PORT=%d", pub),
		"SERVE_ADMIN_HOST=127.0.0.1", fmt.Sprintf("SERVE_ADMIN_PORT=%d", adm),
		"STRATEGIES_ACCESS_TOKEN=jwt",
		"STRATEGIES_JWT_SCOPE_CLAIM=both",
		"TTL_ACCESS_TOKEN="+accessTTL.String(),
		"SECRETS_SYSTEM=viewmux-test-system-secret-0123456789",
		"LOG_LEVEL=warn",
	)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting hydra: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("hydra's output:\n%s", out.String())
		}
	})
	// Ready when both ports answer their health check.
	deadline := time.Now().Add(60 * time.Second)
	for _, u := range []string{h.Issuer + "/health/ready", h.Admin + "/health/ready"} {
		for {
			resp, err := http.Get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-done:
				t.Fatalf("hydra exited:\n%s", out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("hydra did not get ready in 60 s (%s: %v):\n%s", u, err, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return h
}

// Client registers a client_credentials client that may ask for scopes
// and audiences, and returns its id and secret.
func (h *Hydra) Client(t testing.TB, scopes string, audiences ...string) (id, secret string) {
	t.Helper()
	body := map[string]any{
		"grant_types":                []string{"client_credentials"},
		"scope":                      scopes,
		"audience":                   audiences,
		"token_endpoint_auth_method": "client_secret_basic", // what the TypeScript SDK's client_credentials provider uses
		"access_token_strategy":      "jwt",
	}
	var out struct {
		ID     string `json:"client_id"`
		Secret string `json:"client_secret"`
	}
	h.admin(t, http.MethodPost, "/admin/clients", body, &out)
	return out.ID, out.Secret
}

// SetLifespan sets how long the access tokens of client id live.
func (h *Hydra) SetLifespan(t testing.TB, id string, d time.Duration) {
	t.Helper()
	h.admin(t, http.MethodPut, "/admin/clients/"+url.PathEscape(id)+"/lifespans",
		map[string]any{"client_credentials_grant_access_token_lifespan": d.String()}, nil)
}

// Token mints an access token for the client with scope and audience.
func (h *Hydra) Token(t testing.TB, id, secret, scope, audience string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {scope}}
	if audience != "" {
		form.Set("audience", audience)
	}
	req, _ := http.NewRequest(http.MethodPost, h.Issuer+"/oauth2/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret)) // RFC 6749 §2.3.1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("hydra token: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("hydra token: %s: %s", resp.Status, data)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(data, &tok); err != nil || strings.Count(tok.AccessToken, ".") != 2 {
		t.Fatalf("hydra token: not a JWT access token: %s", data)
	}
	return tok.AccessToken
}

// RotateKeys adds a new signing key to the access token key set; hydra
// signs later tokens with it, and its JWKS lists both.
func (h *Hydra) RotateKeys(t testing.TB, kid string) {
	t.Helper()
	h.admin(t, http.MethodPost, "/admin/keys/hydra.jwt.access-token", map[string]any{"alg": "RS256", "kid": kid, "use": "sig"}, nil)
}

func (h *Hydra) admin(t testing.TB, method, path string, body, out any) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, h.Admin+path, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("hydra %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("hydra %s %s: %s: %s", method, path, resp.Status, got)
	}
	if out != nil {
		if err := json.Unmarshal(got, out); err != nil {
			t.Fatalf("hydra %s %s: %v: %s", method, path, err, got)
		}
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
