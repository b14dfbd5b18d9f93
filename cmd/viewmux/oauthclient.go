package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/redact"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// conformanceMetadataURL is the Client ID Metadata Document URL the
// conformance suite's CIMD scenarios expect a client to use.
const conformanceMetadataURL = "https://conformance-test.local/client-metadata.json"

// cmdOAuthClient is the hidden `viewmux oauth-client URL`: viewmux's
// upstream stack, with its OAuth client, connects to the MCP server at
// URL, logs in without a person (the authorization server must approve
// by itself and redirect straight back, as the conformance suite's do),
// lists the tools and calls the first. It is the client command the
// conformance suite's auth/* scenarios run (integration). The suite's
// MCP_CONFORMANCE_CONTEXT may carry a pre-registered client_id and
// client_secret. Tokens go to a temporary state directory, removed at
// exit; nothing secret is printed.
func cmdOAuthClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("oauth-client", stdout)
	metadataURL := fs.String("client-metadata-url", conformanceMetadataURL, "the Client ID Metadata Document `URL` (used where the server supports one)")
	timeout := fs.Duration("timeout", 20*time.Second, "give up after `DURATION`")
	if err := fs.parseAllowingArgs(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fs.usageErr(errors.New("want the server URL"))
	}
	dir, err := os.MkdirTemp("", "viewmux-oauth-client-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	oc := &configs.UpstreamOAuth{StateDir: dir, ClientMetadataURL: *metadataURL}
	if raw := os.Getenv("MCP_CONFORMANCE_CONTEXT"); raw != "" {
		var cc struct {
			ClientID     string `json:"client_id"`
			ClientSecret string `json:"client_secret"`
		}
		if err := json.Unmarshal([]byte(raw), &cc); err != nil {
			return fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
		}
		oc.ClientID, oc.ClientSecret = cc.ClientID, cc.ClientSecret
	}
	cfg := &configs.Upstream{Name: "conformance", Transport: configs.TransportHTTP, URL: fs.Arg(0), OAuth: oc,
		ConnectTimeout: *timeout, CallTimeout: *timeout, MaxMessageBytes: 16 << 20, MaxCatalogItems: 10000, MaxCatalogBytes: 16 << 20}
	if v := os.Getenv("MCP_CONFORMANCE_PROTOCOL_VERSION"); v != "" {
		cfg.Protocol = v
	}
	// Every token the login obtains is masked in what is logged.
	secrets := &redact.Live{}
	log := slog.New(redact.NewHandlerFunc(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}), secrets.Apply))
	u := upstream.New(cfg, upstream.Options{
		Logger:        log,
		OAuth:         oauth.Options{OnSecret: secrets.Add},
		ClientVersion: version(),
		MinBackoff:    time.Minute, // one attempt: Start's
		OAuthLogin: func(ctx context.Context, c *oauth.Client, ch oauth.Challenge, scopes []string) error {
			_, err := c.Login(ctx, oauth.LoginOptions{RedirectURI: "http://127.0.0.1:9/callback",
				Authorize: oauth.AutoApprove(nil), Challenge: &ch, Scopes: scopes})
			return err
		},
	})
	defer u.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := u.Start(ctx); err != nil {
		return err
	}
	cat := u.Catalog()
	if cat == nil {
		return errors.New("connected, but no catalog")
	}
	fmt.Fprintf(stdout, "connected: %d tools\n", len(cat.Tools))
	if len(cat.Tools) == 0 {
		return nil
	}
	var req mcp.CallToolRequest
	req.Params.Name = cat.Tools[0].Name
	req.Params.Arguments = map[string]any{}
	res, err := u.CallTool(ctx, req)
	if err != nil {
		return fmt.Errorf("tools/call %q: %w", req.Params.Name, err)
	}
	fmt.Fprintf(stdout, "called %s: isError=%v\n", req.Params.Name, res.IsError)
	return nil
}
