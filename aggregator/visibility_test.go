package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
)

// pinClient is a Client that takes nothing from upstreams.
type pinClient struct{}

func (pinClient) Notify(string, any) {}
func (pinClient) Request(context.Context, string, any) (json.RawMessage, error) {
	return nil, errors.New("no requests")
}
func (pinClient) Capabilities() mcp.ClientCapabilities { return mcp.ClientCapabilities{} }
func (pinClient) LogLevel() mcp.LoggingLevel           { return "" }
func (pinClient) Modern() bool                         { return false }
func (pinClient) Session() string                      { return "" }
func (pinClient) Caller() string                       { return "" }

// TestPinRefusesAnotherUpstream: a request pinned to one upstream that
// would be routed to another is answered with the pin's error before any
// connection is looked at; one pinned to its own upstream goes on.
func TestPinRefusesAnotherUpstream(t *testing.T) {
	cfg, err := configs.Parse("pin.toml", []byte("[upstreams.a]\ncommand = \"unused\"\n[upstreams.b]\ncommand = \"unused\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := New(cfg, Options{}) // not started: a request that gets past the pin fails as upstream down
	defer a.Close()
	notFound := errors.New("answered as nonexistent")
	p := &Prompt{Prompt: mcp.Prompt{Name: "a__greet"}, Upstream: "a", Original: "greet"}
	params := json.RawMessage(`{"name":"a__greet"}`)

	for _, pinned := range []string{"b", ""} {
		_, err := a.GetPrompt(Pin(context.Background(), pinned, notFound), pinClient{}, p, params)
		if !errors.Is(err, notFound) {
			t.Errorf("pinned to %q, a prompt of a: err = %v, want the pin's error", pinned, err)
		}
	}
	_, err = a.GetPrompt(Pin(context.Background(), "a", notFound), pinClient{}, p, params)
	var ue *UpstreamError
	if errors.Is(err, notFound) || !errors.As(err, &ue) || ue.Upstream != "a" {
		t.Errorf("pinned to its own upstream: err = %v, want upstream a's own failure", err)
	}
}
