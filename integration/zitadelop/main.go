// Command zitadelop runs zitadel/oidc's example OpenID provider (its op
// package, example storage and login page, from the Go module proxy) on a
// free loopback port, for viewmux's token exchange tests: it implements
// OAuth 2.0 Token Exchange (RFC 8693), which Ory Hydra v2.3 does not. Its
// clients issue JWT access tokens, which viewmux's [auth.oauth] requires
// (the example's own issue opaque ones). It registers one web client
// (-client-id, -client-secret, -redirect), prints its issuer URL on
// stdout, and serves until stdin is closed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// jwtClient is a client whose access tokens are JWTs.
type jwtClient struct{ op.Client }

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

// jwtStorage is the example storage, its clients issuing JWTs.
type jwtStorage struct{ *storage.Storage }

func (s jwtStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return jwtClient{c}, nil
}

func main() {
	id := flag.String("client-id", "", "the client's `ID`")
	secret := flag.String("client-secret", "", "the client's `SECRET`")
	redirect := flag.String("redirect", "http://127.0.0.1:9/callback", "the client's redirect `URI`")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	issuer := "http://" + ln.Addr().String()
	storage.RegisterClients(storage.WebClient(*id, *secret, *redirect))
	router := exampleop.SetupServer(issuer, jwtStorage{storage.NewStorage(storage.NewUserStore(issuer))}, slog.New(slog.DiscardHandler), false)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	fmt.Println(issuer)
	if err := http.Serve(ln, router); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
