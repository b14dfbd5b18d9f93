package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
)

// headerRecorder records the headers of every request it gets and answers
// 404.
type headerRecorder struct {
	mu   sync.Mutex
	seen []http.Header
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	hdr := r.Header.Clone()
	hdr.Set("X-Recorded-Path", r.URL.Path)
	h.seen = append(h.seen, hdr)
	h.mu.Unlock()
	http.NotFound(w, r)
}

func (h *headerRecorder) requests() []http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]http.Header(nil), h.seen...)
}

// TestRedirectKeepsHeadersToOrigin is finding 7 of issue 17: an upstream
// whose URL 307-redirects every request elsewhere. On another origin (a
// second loopback listener) the target must get none of the configured
// headers, no Authorization from them or from the URL's user:password@,
// and no Referer (which would carry the URL's query key); on the same
// origin the headers are kept. Each transport is tried.
func TestRedirectKeepsHeadersToOrigin(t *testing.T) {
	const key, bearer, password, query = "key-f7e1c0", "tok-2b9d4a", "pw-8c3e55", "q-5a0f19"
	for _, transport := range []string{configs.TransportHTTP, configs.TransportSSE, configs.TransportWebsocket} {
		for _, cross := range []bool{true, false} {
			name := transport + "/same origin"
			if cross {
				name = transport + "/other origin"
			}
			t.Run(name, func(t *testing.T) {
				target := &headerRecorder{}
				other := httptest.NewServer(target)
				t.Cleanup(other.Close)
				mux := http.NewServeMux()
				mux.Handle("/landing", target)
				origin := httptest.NewServer(mux)
				t.Cleanup(origin.Close)
				mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
					to := origin.URL + "/landing"
					if cross {
						to = other.URL + "/landing"
					}
					http.Redirect(w, r, to, http.StatusTemporaryRedirect)
				})

				u, err := url.Parse(origin.URL + "/mcp?token=" + query)
				if err != nil {
					t.Fatal(err)
				}
				u.User = url.UserPassword("user", password)
				if transport == configs.TransportWebsocket {
					u.Scheme = "ws"
				}
				cfg := &configs.Upstream{
					Name: "redir", Transport: transport, URL: u.String(),
					Headers:        map[string]string{"X-Api-Key": key, "Authorization": "Bearer " + bearer},
					ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second, MaxMessageBytes: 1 << 20,
				}
				up := New(cfg, Options{MinBackoff: time.Hour})
				t.Cleanup(func() { up.Close() })
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := up.Start(ctx); err == nil {
					t.Fatal("Start succeeded against a server that answers only 404")
				}

				seen := target.requests()
				if len(seen) == 0 {
					t.Fatal("no request reached the redirect target")
				}
				for i, h := range seen {
					all := strings.Join(flatten(h), "\n")
					leaked := strings.Contains(all, key) || strings.Contains(all, bearer) || h.Get("Authorization") != "" || strings.Contains(all, query)
					if cross && leaked {
						t.Errorf("request %d to another origin carried a configured credential:\n%s", i, all)
					}
					if !cross && (h.Get("X-Api-Key") != key || h.Get("Authorization") != "Bearer "+bearer) {
						t.Errorf("request %d to the same origin lost its configured headers:\n%s", i, all)
					}
				}
			})
		}
	}
}

// flatten lists a header as "Key: value" lines.
func flatten(h http.Header) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	return out
}

// TestSameOrigin checks the origin comparison keepToOrigin uses.
func TestSameOrigin(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"http://h/a", "http://h:80/b", true},
		{"https://H.example/a", "https://h.example:443/", true},
		{"ws://h:8080/a", "http://h:8080/b", true},
		{"wss://h/a", "https://h/b", true},
		{"http://h/a", "https://h/a", false},
		{"http://h:8080/a", "http://h:8081/a", false},
		{"http://h/a", "http://sub.h/a", false},
		{"http://h/a", "http://h.evil/a", false},
	}
	for _, tt := range tests {
		a, _ := url.Parse(tt.a)
		b, _ := url.Parse(tt.b)
		if got := sameOrigin(a, b); got != tt.want {
			t.Errorf("sameOrigin(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
