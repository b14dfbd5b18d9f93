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
