package sessions

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file serves the browser step of per-user upstream credentials
// (credentials = "per-user", issue 19 §3): GET /oauth/connect/NAME,
// POST /oauth/connect/NAME and GET /oauth/callback. The state (tickets,
// pending logins) is the aggregator's (aggregator/connect.go).
//
//   - GET /oauth/connect/NAME with the caller's bearer token answers with
//     a connect link for that caller (a ticket, good once, for ten
//     minutes); a call on the upstream without a login gives the same
//     link in its tool error. A browser carries no bearer token: the
//     ticket stands for the identity.
//   - GET /oauth/connect/NAME?ticket=T shows a confirmation page naming
//     the identity and the upstream, whose button POSTs the ticket. Only
//     the POST uses the ticket and starts the login: a link opened by
//     accident, prefetched or sent by someone else binds nothing by
//     itself, and a page elsewhere cannot submit the form (Origin).
//   - The POST sets a cookie (HttpOnly, SameSite=Lax, path /oauth/callback)
//     and redirects to the authorization server; the callback is taken
//     only with that cookie, so an authorization response cannot be
//     replayed in another browser.

// connectCookie carries the nonce of the login this browser began.
const connectCookie = "viewmux_connect"

// connectTimeout bounds discovery, registration and the code exchange.
const connectTimeout = 30 * time.Second

// handleConnect registers the connect and callback pages on mux.
func (s *Server) handleConnect(mux *http.ServeMux) {
	mux.HandleFunc("GET /oauth/connect/{upstream}", s.serveConnect)
	mux.HandleFunc("POST /oauth/connect/{upstream}", s.serveConnectPost)
	mux.HandleFunc("GET "+aggregator.CallbackPath, s.serveCallback)
}

// ownOrigin reports whether o is the origin of viewmux's public URL: the
// confirmation page's own form posts from it.
func (s *Server) ownOrigin(o string) bool {
	base, ok := s.agg.ConfigPublicBase()
	return ok && strings.EqualFold(o, base)
}

// identityName is how the pages name an identity (Client.Caller): an
// OAuth subject, or a static token by the short hash audit lines use.
func identityName(who string) string {
	if sub, ok := strings.CutPrefix(who, "oauth:"); ok {
		return "the OAuth subject " + sub
	}
	if h, ok := strings.CutPrefix(who, "token:"); ok && len(h) >= 8 {
		return "the static token token:" + h[:8]
	}
	return who
}

// whoOf returns the identity of r's bearer token, as callerOf names it
// for the doors; an error when r carries none, or one viewmux does not
// take.
func (s *Server) whoOf(r *http.Request) (string, error) {
	res := s.Resolver()
	if !res.AuthRequired() {
		return "", errNoBearer
	}
	sel, err := grant.SelectionFromRequest(r)
	if err != nil {
		return "", err
	}
	if !sel.HasToken {
		return "", errNoBearer
	}
	b, err := res.Resolve(grant.Selection{Token: sel.Token, HasToken: true})
	if err != nil {
		return "", err
	}
	if !b.Authed {
		return "", errNoBearer
	}
	return callerOf(r, b), nil
}

// errNoBearer is why a connect link was not given: no bearer token.
var errNoBearer = errors.New("no bearer token")

func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("upstream")
	noStore(w)
	ticket := r.URL.Query().Get("ticket")
	if ticket == "" {
		who, err := s.whoOf(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", s.Resolver().Challenge("", "", ""))
			http.Error(w, "connecting an account needs your bearer token (or the link a tool error gave you)", http.StatusUnauthorized)
			return
		}
		link, err := s.agg.ConnectTicketFor(name, who)
		if err != nil {
			if state.IsDown(err) {
				s.log.Warn("per-user connect: no ticket minted", "upstream", name, "error", err)
				http.Error(w, storeDown, http.StatusServiceUnavailable)
				return
			}
			http.Error(w, err.Error(), connectErrorCode(err, http.StatusBadRequest))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "Open this link in a browser to connect your account to upstream %s (it works once, for ten minutes):\n%s\n", name, link)
		return
	}
	up, who, ok, err := s.agg.ConnectTicket(ticket)
	if err != nil {
		s.log.Warn("per-user connect: the ticket cannot be read", "upstream", name, "error", err)
		connectPage(w, http.StatusServiceUnavailable, "Try again in a moment", storeDown, nil)
		return
	}
	if !ok || up != name {
		connectPage(w, http.StatusBadRequest, "Link not valid", aggregator.ErrBadConnect.Error(), nil)
		return
	}
	connectPage(w, http.StatusOK, "Connect your account", "", &confirmData{Upstream: name, Identity: identityName(who), Ticket: ticket, Action: connectAction(name)})
}

func (s *Server) serveConnectPost(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("upstream")
	noStore(w)
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		connectPage(w, http.StatusBadRequest, "Link not valid", "the form could not be read", nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), connectTimeout)
	defer cancel()
	authURL, nonce, err := s.agg.BeginConnect(ctx, name, r.PostForm.Get("ticket"))
	switch {
	case errors.Is(err, aggregator.ErrBadConnect):
		connectPage(w, http.StatusBadRequest, "Link not valid", err.Error(), nil)
		return
	case errors.Is(err, state.ErrFull):
		connectPage(w, http.StatusServiceUnavailable, "Busy", err.Error(), nil)
		return
	case state.IsDown(err):
		s.log.Warn("per-user connect failed to start", "upstream", name, "error", err)
		connectPage(w, http.StatusServiceUnavailable, "Try again in a moment", storeDown, nil)
		return
	case err != nil:
		s.log.Warn("per-user connect failed to start", "upstream", name, "error", err)
		connectPage(w, http.StatusBadGateway, "Could not start the login", s.agg.Redact(err.Error()), nil)
		return
	}
	base, _ := s.agg.ConfigPublicBase()
	http.SetCookie(w, &http.Cookie{Name: connectCookie, Value: nonce, Path: aggregator.CallbackPath, MaxAge: 600,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: strings.HasPrefix(base, "https://")})
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

func (s *Server) serveCallback(w http.ResponseWriter, r *http.Request) {
	noStore(w)
	var nonce string
	if c, err := r.Cookie(connectCookie); err == nil {
		nonce = c.Value
	}
	ctx, cancel := context.WithTimeout(r.Context(), connectTimeout)
	defer cancel()
	name, who, err := s.agg.FinishConnect(ctx, r.URL, nonce)
	if state.IsDown(err) && !errors.Is(err, aggregator.ErrBadConnect) {
		// The pending login may still be there: the browser keeps its
		// cookie, so that reloading the page finishes it.
		s.log.Warn("per-user connect failed", "upstream", name, "error", err)
		connectPage(w, http.StatusServiceUnavailable, "Try again in a moment", "viewmux cannot reach its state store just now, where logins are kept. Reload this page in a moment; if the login still does not complete, start again from the link in the tool error.", nil)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: connectCookie, Value: "", Path: aggregator.CallbackPath, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	if err != nil {
		if !errors.Is(err, aggregator.ErrBadConnect) {
			s.log.Warn("per-user connect failed", "upstream", name, "error", err)
		}
		connectPage(w, http.StatusBadRequest, "The login did not complete", s.agg.Redact(err.Error()), nil)
		return
	}
	s.log.Info("per-user account connected", "upstream", name)
	connectPage(w, http.StatusOK, "Connected", fmt.Sprintf("Upstream %s now acts as your account for %s. You can close this page and retry your call.", name, identityName(who)), nil)
}

// connectAction is the confirmation form's target.
// storeDown is what a connect page says while the state store does not
// answer: the operator's logs say which store.
const storeDown = "viewmux cannot reach its state store just now, where connect links and logins are kept. Nothing was changed; try the same link again in a moment."

// connectErrorCode is the status of a connect step's error: 503 while the
// state store does not answer or is full, else def.
func connectErrorCode(err error, def int) int {
	if state.IsDown(err) || errors.Is(err, state.ErrFull) {
		return http.StatusServiceUnavailable
	}
	return def
}

func connectAction(name string) string { return "/oauth/connect/" + url.PathEscape(name) }

func noStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; form-action 'self' https: http:; frame-ancestors 'none'")
}

type confirmData struct {
	Upstream, Identity, Ticket, Action string
}

var connectTmpl = template.Must(template.New("connect").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>viewmux: {{.Title}}</title></head>
<body><h1>{{.Title}}</h1>
{{if .Message}}<p>{{.Message}}</p>{{end}}
{{with .Confirm}}<p>Connect <b>your account at upstream {{.Upstream}}</b> to <b>{{.Identity}}</b> on this viewmux?</p>
<p>Calls that {{.Identity}} makes to upstream {{.Upstream}} will then act as the account you log in with next.</p>
<p><b>Only continue if you opened this link yourself</b>, from a tool error your own client showed you. If someone sent you this link, close this page: continuing would let them act as your account.</p>
<form method="post" action="{{.Action}}"><input type="hidden" name="ticket" value="{{.Ticket}}"><button type="submit">Connect my account as {{.Identity}}</button></form>{{end}}
</body></html>
`))

// connectPage writes one of the connect pages.
func connectPage(w http.ResponseWriter, code int, title, msg string, confirm *confirmData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	if err := connectTmpl.Execute(w, map[string]any{"Title": title, "Message": msg, "Confirm": confirm}); err != nil {
		io.WriteString(w, "\n")
	}
}

// subjectTokens hands each request's bearer token down to
// credentials = "exchange" upstreams (withSubjectToken), when one is
// configured.
func (s *Server) subjectTokens(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.agg.Exchanges() {
			r = withSubjectToken(r)
		}
		next.ServeHTTP(w, r)
	})
}

// withSubjectToken returns r with its bearer token in its context, where
// a credentials = "exchange" upstream's connection finds the caller's
// token to exchange (aggregator.WithSubjectToken). Requests without one
// are returned as they are.
func withSubjectToken(r *http.Request) *http.Request {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return r
	}
	return r.WithContext(aggregator.WithSubjectToken(r.Context(), strings.TrimSpace(tok)))
}
