package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/statedir"
	"github.com/viewmux/viewmux/internal/termsafe"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// authSubcommands are what `viewmux auth` takes first, for completions.
var authSubcommands = []string{"login", "status", "logout"}

// loginTimeout bounds how long `auth login` waits for the callback.
const loginTimeout = 10 * time.Minute

// cmdAuth is `viewmux auth login|status|logout`.
func cmdAuth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("auth", stdout)
	configPath := fs.String("config", "", "read the config from `FILE` (default: discovered, else the embedded quickstart)")
	noBrowser := fs.Bool("no-browser", false, "login: only print the authorization URL; do not open a browser")
	port := fs.Int("port", 0, "login: take the callback on `PORT` of 127.0.0.1 (0 = any free port); for a client registered with a fixed redirect URI")
	asJSON := fs.Bool("json", false, "status: print JSON")
	sub, operands, err := fs.parseSubcommand(args)
	if err != nil {
		return err
	}
	switch sub {
	case "login", "logout":
		if len(operands) != 1 {
			return fs.usageErr(fmt.Errorf("%s: want one UPSTREAM", sub))
		}
	case "status":
		if len(operands) > 0 {
			return fs.usageErr(fmt.Errorf("status: unexpected argument %q", operands[0]))
		}
	case "":
		return fs.usageErr(errors.New("want a subcommand: login, status or logout"))
	default:
		return fs.usageErr(fmt.Errorf("unknown subcommand %q: want login, status or logout", sub))
	}
	if *port < 0 || *port > 65535 {
		return fs.usageErr(fmt.Errorf("--port %d is not a port", *port))
	}
	_, cfg, err := openConfig(*configPath, configSource{})
	if err != nil {
		return err
	}
	if !hasStateStore(cfg) {
		return configErr(fmt.Errorf("%s: %w", cfg.Source, statedir.ErrNoDir))
	}
	lo, closeStore, err := loginStore(cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	switch sub {
	case "status":
		return authStatus(cfg, lo, *asJSON, stdout)
	case "logout":
		uc, err := oauthUpstream(cfg, operands[0])
		if err != nil {
			return err
		}
		o := lo
		o.Headers = uc.Headers
		c := oauth.New(uc.Name, uc.URL, *uc.OAuth, o)
		// Revoked at the authorization server first (RFC 7009), where it
		// offers that; removed here whatever it answers.
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		revoked, rerr := c.Revoke(rctx)
		cancel()
		removed, err := c.Logout()
		if err != nil {
			return fmt.Errorf("upstream %q: logout: %w", uc.Name, err)
		}
		if !removed {
			fmt.Fprintf(stdout, "%s was not logged in.\n", uc.Name)
			return nil
		}
		fmt.Fprintf(stdout, "Logged out of %s: removed %s. A running viewmux stops using the token at its next request (within a second on a shared store).\n", uc.Name, c.Store().Path(uc.Name))
		switch {
		case errors.Is(rerr, oauth.ErrNoRevocation):
			fmt.Fprintf(stdout, "The authorization server offers no revocation: its tokens stay valid until they expire.\n")
		case rerr != nil:
			fmt.Fprintf(stdout, "The tokens could not be revoked at the authorization server (%s): they stay valid until they expire.\n", termsafe.Escape(rerr.Error()))
		case revoked:
			fmt.Fprintf(stdout, "The tokens were revoked at the authorization server.\n")
		}
		return nil
	}
	uc, err := oauthUpstream(cfg, operands[0])
	if err != nil {
		return err
	}
	return authLogin(ctx, uc, lo, *port, !*noBrowser, stdout, stderr)
}

// loginStore returns the options of OAuth clients that keep their logins
// where cfg's [state] table says (the Redis or Valkey server of
// state.url, else the files of server.state_dir), sealed with its
// encryption key when there is one, and the function that closes the
// store.
func loginStore(cfg *configs.Config) (oauth.Options, func(), error) {
	sealer, err := oauth.NewSealer(cfg.State)
	if err != nil {
		return oauth.Options{}, nil, configErr(fmt.Errorf("%s: %w", cfg.Source, err))
	}
	st, err := openState(cfg)
	if err != nil {
		return oauth.Options{}, nil, err
	}
	return oauth.Options{State: st, Sealer: sealer}, func() { st.Close() }, nil
}

// oauthUpstream returns the upstream called name, which must have oauth.
func oauthUpstream(cfg *configs.Config, name string) (*configs.Upstream, error) {
	var names []string
	for _, u := range cfg.Upstreams {
		if u.OAuth == nil {
			continue
		}
		if u.Name == name {
			return u, nil
		}
		names = append(names, u.Name)
	}
	for _, u := range cfg.Upstreams {
		if u.Name == name {
			return nil, configErr(fmt.Errorf("%s: upstream %q has no oauth = true", cfg.Source, name))
		}
	}
	if len(names) == 0 {
		return nil, configErr(fmt.Errorf("%s: no upstream %q, and no upstream has oauth = true", cfg.Source, name))
	}
	return nil, configErr(fmt.Errorf("%s: no upstream %q (upstreams with oauth: %s)", cfg.Source, name, strings.Join(names, ", ")))
}

// authLogin runs one login: it listens on a loopback redirect URI, prints
// (and opens) the authorization URL and waits for the callback.
func authLogin(ctx context.Context, uc *configs.Upstream, lo oauth.Options, port int, browser bool, stdout, stderr io.Writer) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("listening for the OAuth callback: %w", err)
	}
	redirect := fmt.Sprintf("http://127.0.0.1:%d/callback", ln.Addr().(*net.TCPAddr).Port)
	cb := newCallback()
	srv := &http.Server{Handler: cb, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		srv.Shutdown(sctx)
		cancel()
		<-served
	}()

	ctx, cancel := context.WithTimeout(ctx, loginTimeout)
	defer cancel()
	lo.Headers = uc.Headers
	c := oauth.New(uc.Name, uc.URL, *uc.OAuth, lo)
	scopes := c.Scopes() // a refused call's wider scope, from the stored login
	rec, err := c.Login(ctx, oauth.LoginOptions{RedirectURI: redirect, Scopes: scopes,
		Authorize: func(ctx context.Context, authURL string) (*url.URL, error) {
			if u, err := url.Parse(authURL); err == nil {
				cb.expect(u.Query().Get("state"))
			}
			fmt.Fprintf(stdout, "To log in to %s, open this URL in a browser:\n\n  %s\n\nWaiting for the callback on %s ...\n", uc.Name, authURL, redirect)
			if browser {
				if err := openBrowser(authURL); err != nil {
					fmt.Fprintf(stderr, "viewmux: no browser opened (%v): open the URL yourself\n", err)
				}
			}
			select {
			case u := <-cb.got:
				return u, nil
			case <-ctx.Done():
				return nil, fmt.Errorf("no callback within %s: %w", loginTimeout, context.Cause(ctx))
			}
		}})
	cb.finish(err)
	if err != nil {
		return fmt.Errorf("upstream %q: %w", uc.Name, err)
	}
	fmt.Fprintf(stdout, "Logged in to %s at %s%s. A running viewmux with the same state_dir picks the login up without a restart.\n",
		uc.Name, termsafe.Escape(rec.Issuer), describeLogin(rec.Expiry, rec.Granted, rec.Scopes))
	return nil
}

// describeLogin is "; expires …; scopes …" for a login's summary.
func describeLogin(expiry time.Time, granted, asked []string) string {
	var b strings.Builder
	if !expiry.IsZero() {
		fmt.Fprintf(&b, "; token expires %s", expiry.UTC().Format(time.RFC3339))
	}
	sc := granted
	if sc == nil {
		sc = asked
	}
	if len(sc) > 0 {
		fmt.Fprintf(&b, "; scopes %s", termsafe.Escape(strings.Join(sc, " ")))
	}
	return b.String()
}

// callback is the loopback redirect URI's handler: the first GET
// /callback carrying this login's state is the answer (anything else on
// the port, another local program's guess included, is refused and the
// wait goes on); the browser is told the outcome once it is known.
type callback struct {
	got   chan *url.URL
	once  sync.Once
	done  chan struct{}
	err   error
	mu    sync.Mutex
	state string // the state the callback must carry; set before the URL is shown
}

// expect sets the state a callback must carry.
func (c *callback) expect(state string) {
	c.mu.Lock()
	c.state = state
	c.mu.Unlock()
}

func newCallback() *callback {
	return &callback{got: make(chan *url.URL, 1), done: make(chan struct{})}
}

func (c *callback) finish(err error) {
	c.err = err
	close(c.done)
}

func (c *callback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/callback" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	c.mu.Lock()
	want := c.state
	c.mu.Unlock()
	if want == "" || subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("state")), []byte(want)) != 1 {
		http.Error(w, "not the answer to this login", http.StatusBadRequest)
		return
	}
	first := false
	c.once.Do(func() {
		first = true
		u := *r.URL
		c.got <- &u
	})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if !first {
		io.WriteString(w, "<!doctype html><title>viewmux</title><p>This login was already answered.</p>")
		return
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		io.WriteString(w, "<!doctype html><title>viewmux</title><p>Still logging in: see the terminal.</p>")
		return
	case <-r.Context().Done():
		return
	}
	msg := "Logged in. You can close this tab."
	if c.err != nil {
		// Never the code or the tokens: only what went wrong.
		msg = "The login failed: " + c.err.Error()
	}
	fmt.Fprintf(w, "<!doctype html><title>viewmux</title><p>%s</p>", html.EscapeString(msg))
}

// openBrowser opens u in the user's browser when one is available:
// xdg-open where there is a display (Linux and BSDs), open on macOS.
func openBrowser(u string) error {
	var name string
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		return errors.New("opening a browser is not supported on Windows")
	default:
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return errors.New("no DISPLAY or WAYLAND_DISPLAY")
		}
		name = "xdg-open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, u)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait() // reaped whenever it ends; the login does not wait for it
	return nil
}

// authStatusRow is one line of `auth status`.
type authStatusRow struct {
	Upstream string   `json:"upstream"`
	LoggedIn bool     `json:"logged_in"`
	Issuer   string   `json:"issuer,omitempty"`
	Expires  string   `json:"expires,omitempty"` // RFC 3339; "" = not said
	Expired  bool     `json:"expired,omitempty"`
	Refresh  bool     `json:"refresh_token"`
	Scopes   []string `json:"scopes,omitempty"`
	// MoreScope are the scopes the upstream refused a request for that
	// the login was not granted: the next login asks for them.
	MoreScope  []string `json:"more_scope,omitempty"`
	LoggedInAt string   `json:"logged_in_at,omitempty"`
	Error      string   `json:"error,omitempty"`
	// Credentials is "per-user" or "exchange" for an upstream each user
	// reaches as themselves; Users counts the users with a stored login
	// (per-user). The operator's login then only lists the tools.
	Credentials string `json:"credentials,omitempty"`
	Users       int    `json:"users,omitempty"`
}

// authStatus prints each oauth upstream's login: never a token.
func authStatus(cfg *configs.Config, lo oauth.Options, asJSON bool, stdout io.Writer) error {
	now := time.Now()
	var rows []authStatusRow
	for _, uc := range cfg.Upstreams {
		if uc.OAuth == nil {
			continue
		}
		row := authStatusRow{Upstream: uc.Name}
		c := oauth.New(uc.Name, uc.URL, *uc.OAuth, lo)
		if uc.PerUser() {
			row.Credentials = uc.Credentials
			if uc.Credentials == configs.CredentialsPerUser {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				users, err := c.Store().Users(ctx, uc.Name)
				cancel()
				if err != nil {
					row.Error = err.Error()
				}
				row.Users = len(users)
			}
		}
		st, err := c.Status()
		if err != nil {
			row.Error = err.Error()
		}
		row.LoggedIn, row.Issuer, row.Refresh, row.Scopes, row.MoreScope = st.LoggedIn, st.Issuer, st.Refresh, st.Scopes, st.MoreScopes
		if !st.Expiry.IsZero() {
			row.Expires = st.Expiry.UTC().Format(time.RFC3339)
			row.Expired = now.After(st.Expiry)
		}
		if !st.LoggedInAt.IsZero() {
			row.LoggedInAt = st.LoggedInAt.UTC().Format(time.RFC3339)
		}
		rows = append(rows, row)
	}
	if asJSON {
		if rows == nil {
			rows = []authStatusRow{}
		}
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return nil
	}
	if len(rows) == 0 {
		fmt.Fprintf(stdout, "No upstream in %s has oauth = true.\n", cfg.Source)
		return nil
	}
	for _, r := range rows {
		switch r.Credentials {
		case configs.CredentialsPerUser:
			fmt.Fprintf(stdout, "%s: per-user credentials: %d user(s) connected through /oauth/connect/%s; the operator's login below only lists the tools\n", r.Upstream, r.Users, r.Upstream)
		case configs.CredentialsExchange:
			fmt.Fprintf(stdout, "%s: exchange credentials: each caller's token is exchanged; the operator's login below only lists the tools\n", r.Upstream)
		}
		switch {
		case r.Error != "":
			fmt.Fprintf(stdout, "%s: %s\n", r.Upstream, termsafe.Escape(r.Error))
		case !r.LoggedIn:
			fmt.Fprintf(stdout, "%s: needs login: run `viewmux auth login %s`\n", r.Upstream, r.Upstream)
		default:
			exp := "no expiry given"
			if r.Expires != "" {
				exp = "expires " + r.Expires
				if r.Expired {
					exp = "expired " + r.Expires
				}
			}
			refresh := "no refresh token"
			if r.Refresh {
				refresh = "refresh token stored"
			}
			scopes := "(none named)"
			if len(r.Scopes) > 0 {
				scopes = strings.Join(slices.Clone(r.Scopes), " ")
			}
			if len(r.MoreScope) > 0 {
				fmt.Fprintf(stdout, "%s: needs login (more scope: %s): run `viewmux auth login %s`, which asks for these and the scopes below\n",
					r.Upstream, termsafe.Escape(strings.Join(r.MoreScope, " ")), r.Upstream)
			}
			fmt.Fprintf(stdout, "%s: logged in at %s; %s; %s; scopes %s\n", r.Upstream, termsafe.Escape(r.Issuer), exp, refresh, termsafe.Escape(scopes))
		}
	}
	return nil
}
