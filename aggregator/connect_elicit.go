package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/internal/onetime"
)

// This file asks a caller who has not connected its account to a
// per-user upstream through URL elicitation, where its client supports
// that (a legacy client declaring elicitation.url): the client shows the
// connect link, the user logs in in a browser, and the call proceeds
// once the login has landed, instead of failing with the link.

// connectWait bounds how long a call waits for the login the user
// accepted to make.
const connectWait = 5 * time.Minute

// connectPoll is how often the wait looks for the login.
var connectPoll = 250 * time.Millisecond

// canElicitURL reports whether cl takes URL elicitation during a call.
func canElicitURL(cl Client) bool {
	if cl.Modern() {
		return false // 2026-07-28: input_required results, not requests
	}
	c := cl.Capabilities().Elicitation
	return c != nil && c.URL != nil
}

// elicitConnect asks cl, whose call on the per-user upstream name failed
// with ue (not connected), to connect through the link in ue, and waits
// for the login. It reports whether the login landed: the call may be
// sent again.
func (a *Aggregator) elicitConnect(ctx context.Context, cl Client, name string, ue *UpstreamError) bool {
	if ue.Connect == "" || !canElicitURL(cl) {
		return false
	}
	shared := a.perUser(name)
	if shared == nil {
		return false
	}
	id := onetime.Key()
	params := mcp.ElicitationParams{Mode: mcp.ElicitationModeURL, ElicitationID: id, URL: ue.Connect,
		Message: "Upstream " + name + " acts with each user's own account, and yours is not connected. Open the link to connect it (it works once, for ten minutes); the call continues when you have."}
	res, err := cl.Request(ctx, string(mcp.MethodElicitationCreate), params)
	if err != nil {
		return false
	}
	var r struct {
		Action string `json:"action"`
	}
	if json.Unmarshal(res, &r) != nil || r.Action != "accept" {
		return false
	}
	wait, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	t := time.NewTicker(connectPoll)
	defer t.Stop()
	for {
		if st, err := a.userLogin(shared.Config(), cl.Caller()).Status(); err == nil && st.LoggedIn {
			cl.Notify(string(mcp.MethodNotificationElicitationComplete), map[string]any{"elicitationId": id})
			return true
		}
		select {
		case <-wait.Done():
			return false
		case <-t.C:
		}
	}
}

// notConnectedErr returns the UpstreamError of a per-user refusal that
// carries a connect link, or nil.
func notConnectedErr(err error) *UpstreamError {
	if err == nil {
		return nil
	}
	var ue *UpstreamError
	if errors.As(err, &ue) && ue.Connect != "" {
		return ue
	}
	return nil
}
