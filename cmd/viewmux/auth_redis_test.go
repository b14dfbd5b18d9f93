package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// TestAuthOnTheStore: with [state] naming a redis-server, `auth login`
// stores the login there, sealed, for any replica of the same config;
// `auth status` reads it from there; a config with another key sees no
// login and says why; `auth logout` removes it from the store.
func TestAuthOnTheStore(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	s := oauthtest.New(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	}))
	dir := t.TempDir()
	key := strings.Repeat("ab", 32)
	writeCfg := func(name, key string) string {
		p := filepath.Join(dir, name)
		text := "[server]\nstate_dir = " + tomlQuote(filepath.Join(dir, name+".state")) + "\n[state]\nurl = " + tomlQuote(srv.URL()) +
			"\nencryption_key = " + tomlQuote(key) + "\n[upstreams.lin]\nurl = " + tomlQuote(s.URL()) + "\noauth = true\n"
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, other := writeCfg("a.toml", key), writeCfg("b.toml", strings.Repeat("cd", 32))

	var stdout, stderr syncBuf
	done := make(chan int)
	go func() {
		done <- run([]string{"auth", "login", "--no-browser", "--config", cfg, "lin"}, &stdout, &stderr)
	}()
	var authURL string
	deadline := time.Now().Add(20 * time.Second)
	for authURL == "" {
		if m := authURLLine.FindStringSubmatch(stdout.String()); m != nil {
			authURL = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no authorization URL printed:\n%s\n%s", stdout.String(), stderr.String())
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	resp, err := http.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code := <-done; code != exitOK {
		t.Fatalf("login: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}

	// The login is in the store, sealed, and nowhere on disk.
	k, _ := hex.DecodeString(key)
	sealer, _ := state.NewSealer(k)
	rec, _, err := (oauth.Store{State: srv.Open(t, state.RedisOptions{}), Sealer: sealer}).Load(context.Background(), "lin")
	if err != nil || rec == nil || rec.AccessToken == "" {
		t.Fatalf("the login in the store: %v %v", rec, err)
	}
	dump, _ := srv.Dump(context.Background())
	for k, vs := range dump {
		if strings.Contains(strings.Join(vs, " "), rec.AccessToken) {
			t.Errorf("key %s holds the access token in plain text", k)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a.toml.state", "oauth-lin.json")); !os.IsNotExist(err) {
		t.Errorf("a token file was written beside the store: %v", err)
	}

	code, out := runCLI(t, "auth", "status", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "lin: logged in at "+s.AS.URL) {
		t.Fatalf("status from the store: exit %d\n%s", code, out)
	}
	code, out = runCLI(t, "auth", "status", "--config", other)
	if strings.Contains(out, "logged in at") || !strings.Contains(out, "another encryption key") {
		t.Fatalf("status with another key: exit %d\n%s", code, out)
	}
	code, out = runCLI(t, "auth", "logout", "lin", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "Logged out of lin") || !strings.Contains(out, srv.Addr()) {
		t.Fatalf("logout: exit %d\n%s", code, out)
	}
	if got, _ := srv.Do(context.Background(), "KEYS", "*oauth-lin.json"); len(got) != 0 {
		t.Fatalf("the login is still in the store: %v", got)
	}
}
