package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/audit"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/internal/termsafe"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file holds human approval (docs/profiles-and-filters.md): a call
// to a tool an approve glob of the session's rules names goes upstream
// only after a person says yes through the calling client. It is a step of route, after decide
// (view, call rules, rate) and before the forward, so every door, every
// name and every re-entry of the decision (viewmux__call_tool) meets it.
// The question goes to the client the way an upstream's would
// (caller.Request): an elicitation/create on the call's own stream for a
// session, an input_required result for a 2026-07-28 client, whose retry
// carries the answer to any replica (approvals.go).

// approveField is the one field of the approval form.
const approveField = "allow"

// maxShownArguments bounds the arguments an approval question shows, in
// bytes of their JSON; the rest is cut and the cut said.
const maxShownArguments = 2048

// approve asks the calling client's user whether the call m of e may go
// ahead, when the binding's rules say it needs approval
// (filter.Filter.Approval). It returns the approval outcome for the audit
// ("" when none was needed, audit.ApprovalAccepted when a person said yes)
// and, when the call must not go ahead, its answer instead: a tool error
// for a decline, cancel or timeout, a JSON-RPC error for a client that
// cannot ask its user. Nothing goes upstream in those cases. Every
// outcome but "" and accepted is audited here; route audits an accepted
// call with its forward.
func (s *Server) approve(ctx context.Context, session string, b grant.Binding, e *filter.Entry, m *jsonrpc.Message, cl *caller) (string, *routedAnswer) {
	if b.Filter == nil {
		return "", nil
	}
	need, timeout := b.Filter.Approval(e)
	if !need {
		return "", nil
	}
	refuse := func(outcome string, a *routedAnswer) (string, *routedAnswer) {
		s.log.Info("tools/call not approved", "session", session, "tool", e.Tool.Name, "profile", b.Profile, "reason", outcome)
		s.audit.Write(audit.Record{
			Time: time.Now().UTC(), Session: session, Caller: callerName(b), Profile: b.Profile,
			Tool: e.Tool.Name, Upstream: e.Upstream, Decision: audit.Denied, Reason: audit.ReasonApproval, Approval: outcome,
		}, m.Arguments)
		return outcome, a
	}
	// A 2026-07-28 client's retry that answers viewmux's question is
	// decided by its answer, whatever it declares (approvals.go).
	reqState, retryAnswer, retry := "", json.RawMessage(nil), false
	if cl.Modern() {
		reqState, retryAnswer, retry = approvalRetry(cl.params)
	}
	if !retry && !formElicitation(cl.Capabilities()) {
		return refuse(audit.ApprovalUnsupported, &routedAnswer{err: &jsonrpc.Error{
			Code: mcp.MISSING_REQUIRED_CLIENT_CAPABILITY,
			Message: fmt.Sprintf("tool %s needs a person's approval (approve), and this client cannot give it: "+
				"it did not declare the elicitation capability (form mode); nothing was sent to the upstream", e.Tool.Name),
			Data: json.RawMessage(`{"requiredCapabilities":{"elicitation":{"form":{}}}}`),
		}})
	}
	var raw json.RawMessage
	var err error
	var late, expired bool // expired: the wait for a session's answer ended at the timeout
	switch {
	case retry:
		// The answer to a question asked on any replica: its record is
		// spent here, once (approvals.take), and the call this retry
		// carries goes upstream without viewmux's requestState and
		// inputResponses.
		asked, refusal := s.approvals.take(ctx, reqState, b, e, m)
		if refusal != nil {
			return refuse(audit.ApprovalFailed, &routedAnswer{err: refusal})
		}
		raw, late = retryAnswer, time.Since(asked) > timeout
		m.Params = withoutRetry(m.Params)
	case cl.Modern():
		// A 2026-07-28 client answers with a retry, which comes when it
		// comes, to any replica: the question is answered input_required
		// now, and the time to the answer measured on the retry.
		reqState, refusal := s.approvals.ask(ctx, b, e, m)
		if refusal != nil {
			return refuse(audit.ApprovalFailed, &routedAnswer{err: refusal})
		}
		res, err := s.inputRequired(string(mcp.MethodElicitationCreate), approvalParams(e, b.Profile, m.Arguments), reqState)
		if err != nil {
			return refuse(audit.ApprovalFailed, &routedAnswer{err: encodeErr(err)})
		}
		return "", &routedAnswer{result: res}
	default:
		// A session's client answers on the call's own stream: the wait
		// ends at the timeout. The cause is the reason a stream door
		// gives the client when it withdraws the question
		// (notifications/cancelled).
		askCtx, stop := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("no answer within approve_timeout (%s)", timeout))
		asked := time.Now()
		raw, err = cl.Request(askCtx, string(mcp.MethodElicitationCreate), approvalParams(e, b.Profile, m.Arguments))
		late, expired = time.Since(asked) > timeout, askCtx.Err() != nil
		stop()
	}
	timedOut := func() (string, *routedAnswer) {
		return refuse(audit.ApprovalTimeout, s.notApproved(cl.Modern(), fmt.Sprintf(
			"declined by the user: approval timed out (no answer within approve_timeout, %s); the call to %s was not made", timeout, e.Tool.Name)))
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// The client cancelled the call, or viewmux is stopping: no answer,
		// or shutdown's (answer).
		return refuse(audit.ApprovalAbandoned, &routedAnswer{err: ctx.Err()})
	case errors.Is(err, context.DeadlineExceeded) && expired:
		return timedOut()
	case err != nil:
		return refuse(audit.ApprovalFailed, s.notApproved(cl.Modern(), fmt.Sprintf(
			"not approved: asking the user failed (%s); the call to %s was not made", jsonrpc.Printable(err.Error()), e.Tool.Name)))
	case late:
		return timedOut()
	}
	var ans struct {
		Action  string                     `json:"action"`
		Content map[string]json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &ans) != nil {
		return refuse(audit.ApprovalFailed, s.notApproved(cl.Modern(), fmt.Sprintf(
			"not approved: the client's answer is not an elicitation result; the call to %s was not made", e.Tool.Name)))
	}
	switch ans.Action {
	case string(mcp.ElicitationResponseActionAccept):
		if bytes.Equal(bytes.TrimSpace(ans.Content[approveField]), []byte("true")) {
			return audit.ApprovalAccepted, nil
		}
		return refuse(audit.ApprovalDenied, s.notApproved(cl.Modern(), "declined by the user: "+approveField+" was not true; the call to "+e.Tool.Name+" was not made"))
	case string(mcp.ElicitationResponseActionDecline):
		return refuse(audit.ApprovalDeclined, s.notApproved(cl.Modern(), "declined by the user; the call to "+e.Tool.Name+" was not made"))
	case string(mcp.ElicitationResponseActionCancel):
		return refuse(audit.ApprovalCancelled, s.notApproved(cl.Modern(), "declined by the user (cancelled); the call to "+e.Tool.Name+" was not made"))
	}
	return refuse(audit.ApprovalFailed, s.notApproved(cl.Modern(), fmt.Sprintf(
		"not approved: the client answered with the unknown action %q; the call to %s was not made", jsonrpc.Printable(ans.Action), e.Tool.Name)))
}

// formElicitation reports whether a client declared form-mode elicitation:
// elicitation.form, or an empty elicitation object (which meant form
// before modes existed).
func formElicitation(caps mcp.ClientCapabilities) bool {
	el := caps.Elicitation
	return el != nil && (el.Form != nil || el.URL == nil)
}

// approvalParams is the elicitation/create that asks whether the call of e
// with args may go ahead. Only viewmux's own words and the exposed tool
// name (of [A-Za-z0-9_-]) come before the arguments, which are last, on
// one line: compact JSON, in which no string can hold a line break, with
// what a terminal or a text view would act on (bidirectional and
// zero-width controls, line and paragraph separators) shown as escapes,
// and cut at maxShownArguments. A hostile argument cannot end the
// arguments and write lines that read as viewmux's.
func approvalParams(e *filter.Entry, profile string, args json.RawMessage) mcp.ElicitationParams {
	var b strings.Builder
	fmt.Fprintf(&b, "viewmux: the tool %s (upstream %s) needs your approval before it is called.\n", e.Tool.Name, e.Upstream)
	if profile != "" && isPlainName(profile) {
		fmt.Fprintf(&b, "Profile: %s\n", profile)
	}
	b.WriteString("Allow this call? Its arguments, as JSON, exactly as they will be sent:\n")
	b.WriteString(shownArguments(args))
	return mcp.ElicitationParams{
		Message: b.String(),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				approveField: map[string]any{
					"type":        "boolean",
					"title":       "Allow " + e.Tool.Name,
					"description": "Yes sends the call to the upstream unchanged; no, or no answer, does not send it.",
					"default":     false,
				},
			},
			"required": []string{approveField},
		},
	}
}

// isPlainName reports whether s is a config name (profile names are
// validated so; a stateless request's binding holds one too).
func isPlainName(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
	}) < 0
}

// shownArguments renders a call's arguments for the approval question:
// see approvalParams.
func shownArguments(args json.RawMessage) string {
	var buf bytes.Buffer
	if len(bytes.TrimSpace(args)) == 0 {
		return "{}"
	}
	if err := json.Compact(&buf, args); err != nil {
		buf.Reset()
		buf.WriteString(fmt.Sprintf("(not valid JSON) %q", args)) // quoted: one line
	}
	s := buf.String()
	total := len(s)
	if total > maxShownArguments {
		cut := maxShownArguments
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	s = strings.NewReplacer("\u2028", `\u2028`, "\u2029", `\u2029`, "\u0085", `\u0085`).Replace(s)
	s = termsafe.Escape(s)
	if total > maxShownArguments {
		s += fmt.Sprintf(" … (cut: %d bytes in all)", total)
	}
	return s
}

// notApproved is the tool result of a call that was not approved, with
// what 2026-07-28 requires of a result for a modern client.
func (s *Server) notApproved(modern bool, text string) *routedAnswer {
	res := mcp.NewToolResultError(text)
	if modern {
		s.decorate(&res.Result, nil)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return &routedAnswer{err: encodeErr(err)}
	}
	return &routedAnswer{result: b}
}

// callerName is who a binding's requests come from, for the audit: its
// token (as the hex of its sum) or client address (Binding.Who), or
// "local" for the stdio door, whose client launched viewmux.
func callerName(b grant.Binding) string {
	if b.Who == "" && b.Local {
		return "local"
	}
	return b.Who
}
