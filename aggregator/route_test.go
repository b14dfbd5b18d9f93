package aggregator

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/upstream"
)

// TestUpstreamErrTooLarge: a result over max_message_bytes is told as such,
// naming the upstream and the limit, not as the upstream being down.
func TestUpstreamErrTooLarge(t *testing.T) {
	err := upstreamErr("files", "tools/call", 0, fmt.Errorf("upstream %q: tools/call %q: %w", "files", "read", &upstream.TooLargeError{Limit: 4096}))
	var ue *UpstreamError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %#v", err)
	}
	pub := ue.Public()
	if !strings.Contains(pub, "too large") || !strings.Contains(pub, "files") || !strings.Contains(pub, "4096 bytes") || ue.Temporary {
		t.Errorf("public text %q (temporary %v)", pub, ue.Temporary)
	}
	if !errors.Is(err, upstream.ErrTooLarge) {
		t.Error("errors.Is(err, upstream.ErrTooLarge) = false")
	}
}

// TestUpstreamErrLogin: a call an oauth upstream refused for lack of
// scope (or without a usable token) tells the client an operator must
// log in, not that the upstream is down.
func TestUpstreamErrLogin(t *testing.T) {
	for _, cause := range []error{upstream.ErrInsufficientScope, upstream.ErrNeedsLogin} {
		err := upstreamErr("linear", "tools/call", 0, fmt.Errorf("upstream %q: tools/call %q: Post \"https://mcp.linear.app/mcp\": %w: scope \"write\"", "linear", "create", cause))
		var ue *UpstreamError
		if !errors.As(err, &ue) || !ue.Login || ue.Temporary {
			t.Fatalf("err = %#v", err)
		}
		if pub := ue.Public(); !strings.Contains(pub, "viewmux auth login linear") || strings.Contains(pub, "https://") {
			t.Errorf("public text %q", pub)
		}
	}
}

// TestUpstreamErrOutcomeUnknown: a call whose connection ended after the
// upstream received it is told so, in these words, and not as an upstream
// that is restarting (a client that retries may run the call twice).
func TestUpstreamErrOutcomeUnknown(t *testing.T) {
	cause := fmt.Errorf("%w: %w: connection closed: stdout closed: EOF", upstream.ErrDown, upstream.ErrOutcomeUnknown)
	err := upstreamErr("pay", "tools/call", 0, fmt.Errorf("upstream %q: tools/call %q: %w", "pay", "charge", cause))
	var ue *UpstreamError
	if !errors.As(err, &ue) || ue.Temporary {
		t.Fatalf("err = %#v", err)
	}
	if pub, want := ue.Public(), `upstream "pay" closed the connection after receiving the call; it may or may not have run`; pub != want {
		t.Errorf("public text %q, want %q", pub, want)
	}
	if !errors.Is(err, upstream.ErrOutcomeUnknown) {
		t.Error("errors.Is(err, upstream.ErrOutcomeUnknown) = false")
	}
}

// TestUpstreamErrUnreadable: an answer viewmux refused to parse is told
// with the reason, naming the upstream.
func TestUpstreamErrUnreadable(t *testing.T) {
	cause := &upstream.UnreadableError{Reason: errors.New("JSON nested deeper than 10000 levels")}
	err := upstreamErr("deep", "tools/call", 0, fmt.Errorf("upstream %q: tools/call %q: %w", "deep", "t", cause))
	var ue *UpstreamError
	if !errors.As(err, &ue) || ue.Temporary {
		t.Fatalf("err = %#v", err)
	}
	if pub, want := ue.Public(), `upstream "deep" sent an answer viewmux cannot read: JSON nested deeper than 10000 levels`; pub != want {
		t.Errorf("public text %q, want %q", pub, want)
	}
}
