package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ErrNoRevocation is returned by Revoke when the authorization server
// advertises no revocation endpoint.
var ErrNoRevocation = errors.New("the authorization server advertises no revocation endpoint")

// Revoke asks the authorization server of the stored login to revoke its
// tokens (RFC 7009): the refresh token, then the access token, each with
// its token_type_hint and the client's authentication. It removes
// nothing: Logout does. revoked says whether anything was sent; the
// error wraps ErrNoRevocation when the server has no revocation_endpoint
// in its metadata. The server's answer is never quoted but for its error
// code.
func (c *Client) Revoke(ctx context.Context) (revoked bool, err error) {
	c.mu.Lock()
	rec, err := c.load(ctx)
	c.mu.Unlock()
	if err != nil || rec == nil {
		return false, err
	}
	sm, err := serverMetadata(ctx, c.hc, rec.Issuer, false)
	if err != nil {
		return false, fmt.Errorf("revocation: %w", err)
	}
	if sm.RevocationEndpoint == "" {
		return false, fmt.Errorf("revocation: %w (%s)", ErrNoRevocation, rec.Issuer)
	}
	for _, t := range []struct{ token, hint string }{{rec.RefreshToken, "refresh_token"}, {rec.AccessToken, "access_token"}} {
		if t.token == "" {
			continue
		}
		if err := c.revoke(ctx, sm.RevocationEndpoint, rec, t.token, t.hint); err != nil {
			return revoked, err
		}
		revoked = true
	}
	return revoked, nil
}

// revoke sends one revocation request.
func (c *Client) revoke(ctx context.Context, endpoint string, rec *Record, token, hint string) error {
	form := url.Values{"token": {token}, "token_type_hint": {hint}}
	if rec.AuthMethod != "client_secret_basic" {
		form.Set("client_id", rec.ClientID)
		if rec.AuthMethod == "client_secret_post" {
			form.Set("client_secret", rec.ClientSecret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if rec.AuthMethod == "client_secret_basic" {
		req.SetBasicAuth(url.QueryEscape(rec.ClientID), url.QueryEscape(rec.ClientSecret))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("revocation: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var e struct {
		Error string `json:"error"`
	}
	json.Unmarshal(body, &e)
	if e.Error == "" {
		e.Error = "no error code"
	}
	return fmt.Errorf("revocation of the %s: the authorization server answered HTTP %d (%s)", strings.ReplaceAll(hint, "_", " "), resp.StatusCode, clip(e.Error, 64))
}
