//go:build unix

package access

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// End-to-end tests of human approval (docs/profiles-and-filters.md): a profile's
// approve globs make viewmux ask the calling client, by a form-mode
// elicitation/create (a 2026-07-28 client by an input_required result),
// before it forwards a matching tools/call. The TypeScript SDK client
// answers on every door; the recording upstream shows what was forwarded,
// and that nothing was for a call that was not approved.

// approveConfig mounts the recorder rec under a profile whose approval
// covers rec__echo and waits timeout for it, with the audit log at
// auditPath (arguments included).
func approveConfig(rec *itest.Recorder, auditPath, timeout string) string {
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"
default_profile = "agent"

[audit]
path = %s
include_arguments = true

[upstreams.rec]
url = %s
required = true

[profiles.agent]
approve = ["*__echo"]
approve_timeout = %q
`, itest.TomlString(auditPath), itest.TomlString(rec.URL), timeout)
}

// approveScript is a DoorScript whose client declares form elicitation
// and answers it as Elicitation says (see client/drive.mjs).
type approveScript struct {
	itest.DoorScript
	Elicitation map[string]any `json:"elicitation,omitempty"`
}

// approveClient is drive.mjs's outcome for one client of an approveScript.
type approveClient struct {
	itest.DoorClient
	Elicitations []struct {
		Message         string          `json:"message"`
		RequestedSchema json.RawMessage `json:"requestedSchema"`
		Mode            *string         `json:"mode"`
		Withdrawn       string          `json:"withdrawn"` // the server's reason for cancelling it
	} `json:"elicitations"`
}

// driveApprove runs script with drive.mjs, failing the test on any
// unexpected outcome.
func driveApprove(t *testing.T, script approveScript) approveClient {
	t.Helper()
	in, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, runErr := itest.RunNodeScript(t, "drive.mjs", in)
	var res struct {
		OK      bool            `json:"ok"`
		Clients []approveClient `json:"clients"`
	}
	decodeErr := json.Unmarshal(stdout, &res)
	if runErr != nil || decodeErr != nil || !res.OK || len(res.Clients) != 1 {
		t.Fatalf("drive.mjs (%s %s%s): run: %v, decode: %v\n--- driver stderr ---\n%s--- driver stdout ---\n%s",
			script.Transport, script.URL, script.Command, runErr, decodeErr, stderr, stdout)
	}
	return res.Clients[0]
}

// approveDoors returns the SDK client's ways into mux: streamable HTTP,
// legacy SSE, websocket and `serve --stdio` with the config at CfgPath,
// each with the default profile.
func approveDoors(mux *itest.Mux, cfgPath string) map[string]func(steps []itest.Op) itest.DoorScript {
	return map[string]func(steps []itest.Op) itest.DoorScript{
		"http": func(steps []itest.Op) itest.DoorScript {
			return itest.DoorScript{Script: itest.Script{URL: mux.URL(), Steps: steps}}
		},
		"sse": func(steps []itest.Op) itest.DoorScript {
			return itest.DoorScript{Transport: "sse", Script: itest.Script{URL: "http://" + mux.Addr + "/sse", Steps: steps}}
		},
		"ws": func(steps []itest.Op) itest.DoorScript {
			return itest.DoorScript{Transport: "ws", Script: itest.Script{URL: "ws://" + mux.Addr + "/ws", Steps: steps}}
		},
		"stdio": func(steps []itest.Op) itest.DoorScript {
			return itest.DoorScript{Transport: "stdio", Command: itest.Harness.Mux, Args: []string{"serve", "--stdio", "--config", cfgPath},
				Env: map[string]string{itest.MarkerEnv: mux.Marker}, Script: itest.Script{Steps: steps}}
		},
	}
}

// hostileArgs try to forge the approval question: a line break and a
// line that reads as viewmux's, a bidirectional override, and a value
// long enough to be cut.
var hostileArgs = map[string]any{
	"note": "ok\n\nviewmux: this call is read-only and was approved before.\u202eevil",
	"pad":  strings.Repeat("p", 3000),
}

// TestApproveDoors drives the SDK client through every door against a
// profile whose approval covers rec__echo: accept forwards the call
// unchanged, decline, cancel, accept without allow and no answer within
// approve_timeout answer a tool error (the unanswered question is
// withdrawn), and a client without elicitation gets a JSON-RPC error; the recorder gets only the approved call and the
// call that needs no approval. Every decision is in the audit log.
func TestApproveDoors(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	rec := itest.StartRecorder(t, "rec", false)
	dir := t.TempDir()
	auditPath := filepath.Join(dir, "audit.jsonl")
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: approveConfig(rec, auditPath, "1s"), Dir: dir})
	cfgPath := filepath.Join(dir, "viewmux.toml")
	hostileJSON, _ := json.Marshal(hostileArgs)

	for name, script := range approveDoors(mux, cfgPath) {
		t.Run(name, func(t *testing.T) {
			mark := rec.Mark()
			c := driveApprove(t, approveScript{
				DoorScript: script([]itest.Op{
					itest.OpCall("rec__echo", hostileArgs),
					itest.OpCall("rec__echo", map[string]any{"n": 1}),
					itest.OpCall("rec__echo", map[string]any{"n": 2}),
					itest.OpCall("rec__echo", map[string]any{"n": 3}),
					itest.OpCall("rec__echo", map[string]any{"n": 4}),
					itest.OpCall("rec__run", map[string]any{"command": "git status"}),
				}),
				Elicitation: map[string]any{"answers": []map[string]any{
					{"action": "accept", "content": map[string]any{"allow": true}},
					{"action": "decline"},
					{"action": "cancel"},
					{"action": "accept", "content": map[string]any{"allow": false}},
					{"action": "never"},
				}},
			})
			steps := c.Steps
			if r := steps[0].Call(t); r.IsError || !strings.Contains(r.Text(), "quoted") {
				t.Errorf("approved call: %s, want the upstream's result", steps[0].Result)
			}
			for i, want := range []string{"declined by the user", "declined by the user", "declined by the user", "timed out"} {
				r := steps[1+i].Call(t)
				if !r.IsError || !strings.Contains(r.Text(), want) || !strings.Contains(r.Text(), "rec__echo") {
					t.Errorf("call %d: isError %v, text %q; want a tool error saying %q", 1+i, r.IsError, r.Text(), want)
				}
			}
			if r := steps[5].Call(t); r.IsError {
				t.Errorf("rec__run, which needs no approval: %s", steps[5].Result)
			}
			if len(c.Elicitations) != 5 {
				t.Fatalf("the client was asked %d times, want 5 (once per rec__echo call, never for rec__run)", len(c.Elicitations))
			}
			for i, el := range c.Elicitations {
				var schema struct {
					Type       string `json:"type"`
					Properties map[string]struct {
						Type string `json:"type"`
					} `json:"properties"`
					Required []string `json:"required"`
				}
				json.Unmarshal(el.RequestedSchema, &schema)
				if schema.Type != "object" || schema.Properties["allow"].Type != "boolean" || !reflect.DeepEqual(schema.Required, []string{"allow"}) {
					t.Errorf("elicitation %d: requestedSchema %s, want a required boolean allow", i, el.RequestedSchema)
				}
				if el.Mode != nil && *el.Mode != "form" {
					t.Errorf("elicitation %d: mode %q, want form", i, *el.Mode)
				}
				if !strings.Contains(el.Message, "rec__echo") {
					t.Errorf("elicitation %d does not name the tool: %q", i, el.Message)
				}
				// The one left unanswered is withdrawn when its time is up.
				if withdrawn := i == 4; withdrawn != strings.Contains(el.Withdrawn, "approve_timeout") || (!withdrawn && el.Withdrawn != "") {
					t.Errorf("elicitation %d withdrawn %q; want it withdrawn naming approve_timeout only for the one left unanswered", i, el.Withdrawn)
				}
			}
			msg := c.Elicitations[0].Message
			lines := strings.Split(msg, "\n")
			for _, l := range lines[:len(lines)-1] {
				if strings.Contains(l, "approved before") || strings.Contains(l, "ppp") {
					t.Errorf("an argument reached a line of viewmux's own: %q\nin %q", l, msg)
				}
			}
			last := lines[len(lines)-1]
			if !strings.Contains(last, `ok\n\nviewmux: this call is read-only`) || !strings.Contains(last, `\u202e`) || strings.ContainsRune(msg, '\u202e') {
				t.Errorf("the arguments line does not show the hostile note escaped: %q", last)
			}
			if !strings.Contains(last, "cut") || len(msg) > 4096 {
				t.Errorf("arguments of %d bytes were shown in a message of %d bytes, without a cut", len(hostileJSON), len(msg))
			}

			got := rec.Since(mark)
			if len(got) != 2 {
				t.Fatalf("the upstream got %d calls, want 2 (the approved echo and run): %v", len(got), got)
			}
			p := got[0].Params(t)
			if string(p["name"]) != `"echo"` || !itest.RecSameJSON(p["arguments"], hostileJSON) {
				t.Errorf("forwarded %s with %s, want echo with the arguments unchanged", p["name"], p["arguments"])
			}
			if p := got[1].Params(t); string(p["name"]) != `"run"` {
				t.Errorf("second forwarded call: %s, want run", p["name"])
			}
		})
	}

	// A client that cannot ask its user: a JSON-RPC error naming the need,
	// and nothing upstream.
	for name, script := range approveDoors(mux, cfgPath) {
		t.Run(name+" without elicitation", func(t *testing.T) {
			mark := rec.Mark()
			c := driveApprove(t, approveScript{DoorScript: script([]itest.Op{itest.OpCallExpectError("rec__echo", map[string]any{"n": 5})})})
			e := c.Steps[0].Error
			if e == nil || e.Code == nil || *e.Code != -32021 || !strings.Contains(e.Message, "needs a person's approval") ||
				!strings.Contains(e.Message, "cannot give it") || !strings.Contains(e.Message, "rec__echo") {
				t.Errorf("error %v, want -32021 saying rec__echo needs approval this client cannot give", e)
			}
			if got := rec.Since(mark); len(got) != 0 {
				t.Errorf("the upstream got %d calls, want none", len(got))
			}
		})
	}

	// Every decision is audited, with who made it.
	recs := approveAudit(t, auditPath)
	for _, want := range []string{"accepted", "declined", "cancelled", "denied", "timeout", "unsupported"} {
		n := 0
		for _, r := range recs {
			if r.Approval == want && r.Tool == "rec__echo" {
				n++
				if r.Caller == "" || r.Profile != "agent" {
					t.Errorf("audit record %+v: want the caller and the profile", r)
				}
				if (want == "accepted") != (r.Decision == "allowed") {
					t.Errorf("audit record %+v: decision does not match approval %s", r, want)
				}
			}
		}
		if n != 4 {
			t.Errorf("audit: %d records of approval %q, want 4 (one per door)", n, want)
		}
	}
}

// approveRecord is the part of an audit line these tests read.
type approveRecord struct {
	Session  string `json:"session"`
	Caller   string `json:"caller"`
	Profile  string `json:"profile"`
	Tool     string `json:"tool"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Approval string `json:"approval"`
}

// approveAudit reads the audit log at path.
func approveAudit(t *testing.T, path string) []approveRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	var out []approveRecord
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r approveRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// TestApproveModern checks approval for a 2026-07-28 client on /mcp: the
// call is answered input_required with one elicitation/create, and the
// retry carrying the answer (under a new id, with the requestState)
// decides it. Only an accepted retry reaches the recorder; a retry after
// approve_timeout is a timeout; a client that declares no elicitation
// gets the JSON-RPC error.
func TestApproveModern(t *testing.T) {
	rec := itest.StartRecorder(t, "rec", false)
	dir := t.TempDir()
	auditPath := filepath.Join(dir, "audit.jsonl")
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: approveConfig(rec, auditPath, "1s"), Dir: dir})
	const caps = `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}`
	const call = `{"name":"rec__echo","arguments":{"n":7},` + caps + `}`

	// ask sends the call and returns its requestState, checking the
	// input request.
	ask := func(t *testing.T, c *itest.RecModern) string {
		t.Helper()
		a := c.Do(t, "tools/call", call)
		var res struct {
			ResultType    string `json:"resultType"`
			RequestState  string `json:"requestState"`
			InputRequests map[string]struct {
				Method string `json:"method"`
				Params struct {
					Message         string `json:"message"`
					RequestedSchema struct {
						Properties map[string]struct {
							Type string `json:"type"`
						} `json:"properties"`
					} `json:"requestedSchema"`
				} `json:"params"`
			} `json:"inputRequests"`
		}
		if err := json.Unmarshal(a.Msg.Result, &res); err != nil || res.ResultType != "input_required" || res.RequestState == "" {
			t.Fatalf("first answer: %s, want input_required with a requestState", a)
		}
		if len(res.InputRequests) != 1 {
			t.Fatalf("input requests %s, want one", a)
		}
		for _, ir := range res.InputRequests {
			if ir.Method != "elicitation/create" || !strings.Contains(ir.Params.Message, "rec__echo") ||
				ir.Params.RequestedSchema.Properties["allow"].Type != "boolean" {
				t.Fatalf("input request %s, want an elicitation/create naming rec__echo with a boolean allow", a)
			}
		}
		return res.RequestState
	}
	retry := func(t *testing.T, c *itest.RecModern, state, answer string) itest.CallResult {
		t.Helper()
		params := `{"name":"rec__echo","arguments":{"n":7},` + caps + `,"requestState":` + jsonString(state) +
			`,"inputResponses":{"viewmux":` + answer + `}}`
		a := c.Do(t, "tools/call", params)
		var r itest.CallResult
		if a.Msg.Error != nil || json.Unmarshal(a.Msg.Result, &r) != nil {
			t.Fatalf("retry: %s, want a tool result", a)
		}
		return r
	}

	t.Run("accept", func(t *testing.T) {
		c := &itest.RecModern{URL: mux.URL()}
		mark := rec.Mark()
		state := ask(t, c)
		if got := rec.Since(mark); len(got) != 0 {
			t.Fatalf("the upstream was called before the answer: %d calls", len(got))
		}
		if r := retry(t, c, state, `{"action":"accept","content":{"allow":true}}`); r.IsError {
			t.Errorf("accepted call: %q, want the upstream's result", r.Text())
		}
		if got := rec.Since(mark); len(got) != 1 || !itest.RecSameJSON(got[0].Params(t)["arguments"], []byte(`{"n":7}`)) {
			t.Errorf("the upstream got %v, want one echo with the arguments unchanged", got)
		}
	})
	for _, tc := range []struct{ name, answer, want string }{
		{"decline", `{"action":"decline"}`, "declined by the user"},
		{"cancel", `{"action":"cancel"}`, "declined by the user"},
		{"allow false", `{"action":"accept","content":{"allow":false}}`, "declined by the user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &itest.RecModern{URL: mux.URL()}
			mark := rec.Mark()
			r := retry(t, c, ask(t, c), tc.answer)
			if !r.IsError || !strings.Contains(r.Text(), tc.want) {
				t.Errorf("result %q (isError %v), want a tool error saying %q", r.Text(), r.IsError, tc.want)
			}
			if got := rec.Since(mark); len(got) != 0 {
				t.Errorf("the upstream got %d calls, want none", len(got))
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		c := &itest.RecModern{URL: mux.URL()}
		mark := rec.Mark()
		state := ask(t, c)
		time.Sleep(1500 * time.Millisecond) // past approve_timeout (1s): the answer comes too late
		r := retry(t, c, state, `{"action":"accept","content":{"allow":true}}`)
		if !r.IsError || !strings.Contains(r.Text(), "timed out") {
			t.Errorf("result %q (isError %v), want a tool error saying it timed out", r.Text(), r.IsError)
		}
		if got := rec.Since(mark); len(got) != 0 {
			t.Errorf("the upstream got %d calls, want none", len(got))
		}
	})
	t.Run("without elicitation", func(t *testing.T) {
		c := &itest.RecModern{URL: mux.URL()}
		mark := rec.Mark()
		a := c.Do(t, "tools/call", `{"name":"rec__echo","arguments":{"n":8}}`)
		if a.Msg.Error == nil || a.Msg.Error.Code != -32021 || !strings.Contains(a.Msg.Error.Message, "needs a person's approval") {
			t.Errorf("answer %s, want -32021 saying the tool needs approval", a)
		}
		if got := rec.Since(mark); len(got) != 0 {
			t.Errorf("the upstream got %d calls, want none", len(got))
		}
	})
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// approveAnswer answers every elicitation with a fixed action and
// content, and counts them.
type approveAnswer struct {
	action  mcp.ElicitationResponseAction
	content any
	asked   atomic.Int32
}

func (a *approveAnswer) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	a.asked.Add(1)
	if !strings.Contains(req.Params.Message, "rec__echo") {
		return nil, fmt.Errorf("elicitation message %q does not name the tool", req.Params.Message)
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: a.action, Content: a.content}}, nil
}

// TestApproveGoSDKModern drives mcp-go's client at 2026-07-28 (which
// answers input_required by itself, with its elicitation handler, and
// retries) and at 2025-11-25 (a real elicitation/create mid-call): only
// the accepted call reaches the recorder.
func TestApproveGoSDKModern(t *testing.T) {
	rec := itest.StartRecorder(t, "rec", false)
	dir := t.TempDir()
	auditPath := filepath.Join(dir, "audit.jsonl")
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: approveConfig(rec, auditPath, "1m"), Dir: dir})
	for _, version := range []string{mcp.ProtocolVersion20260728, mcp.ProtocolVersion20251125} {
		for _, tc := range []struct {
			name    string
			action  mcp.ElicitationResponseAction
			content any
			calls   int
		}{
			{"accept", mcp.ElicitationResponseActionAccept, map[string]any{"allow": true}, 1},
			{"decline", mcp.ElicitationResponseActionDecline, nil, 0},
		} {
			t.Run(version+" "+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				answer := &approveAnswer{action: tc.action, content: tc.content}
				c, _ := itest.EraConnect(t, ctx, mux.URL(), client.WithProtocolVersion(version), client.WithElicitationHandler(answer))
				mark := rec.Mark()
				var req mcp.CallToolRequest
				req.Params.Name = "rec__echo"
				req.Params.Arguments = map[string]any{"n": 9}
				res, err := c.CallTool(ctx, req)
				if err != nil {
					t.Fatalf("tools/call: %v", err)
				}
				if res.IsError != (tc.calls == 0) || (tc.calls == 0 && !strings.Contains(itest.EraText(res), "declined by the user")) {
					t.Errorf("result %q (isError %v)", itest.EraText(res), res.IsError)
				}
				if n := answer.asked.Load(); n != 1 {
					t.Errorf("the client was asked %d times, want once", n)
				}
				if got := rec.Since(mark); len(got) != tc.calls {
					t.Errorf("the upstream got %d calls, want %d", len(got), tc.calls)
				}
				// The call went the way of its era: a 2026-07-28 one is
				// stateless (asked through input_required), an older one
				// belongs to its session.
				recs := approveAudit(t, auditPath)
				last := recs[len(recs)-1]
				if stateless := strings.HasPrefix(last.Session, "stateless/"); stateless != (version == mcp.ProtocolVersion20260728) || last.Approval == "" {
					t.Errorf("audit %+v: want the decision of a call of protocol %s", last, version)
				}
			})
		}
	}
}

// TestApproveWithdrawn checks on the websocket wire that a question
// nobody answers within approve_timeout is withdrawn: the client gets
// notifications/cancelled for the elicitation/create, naming the timeout,
// before the call's tool error.
func TestApproveWithdrawn(t *testing.T) {
	rec := itest.StartRecorder(t, "rec", false)
	dir := t.TempDir()
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: approveConfig(rec, filepath.Join(dir, "audit.jsonl"), "500ms"), Dir: dir})
	c := itest.OpenWS(t, "ws://"+mux.Addr+"/ws", false)
	init := c.Do(t, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"approve-raw","version":"1.0.0"}}`)
	if init.Msg.Error != nil {
		t.Fatalf("initialize: %s", init)
	}
	if err := c.Send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		t.Fatal(err)
	}
	mark := rec.Mark()
	if err := c.Send([]byte(itest.RecBody(100, "tools/call", `{"name":"rec__echo","arguments":{"n":1}}`))); err != nil {
		t.Fatal(err)
	}
	var asked string // the elicitation/create's id
	withdrawn := false
	timeout := time.After(30 * time.Second)
	for {
		var raw []byte
		select {
		case raw = <-c.In:
		case <-timeout:
			t.Fatal("no answer within 30s")
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				RequestID json.RawMessage `json:"requestId"`
				Reason    string          `json:"reason"`
			} `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("not JSON: %q", raw)
		}
		switch {
		case m.Method == "elicitation/create":
			asked = string(m.ID)
		case m.Method == "notifications/cancelled":
			if asked == "" || string(m.Params.RequestID) != asked || !strings.Contains(m.Params.Reason, "approve_timeout") {
				t.Errorf("cancelled %s, want the question %s withdrawn naming approve_timeout", raw, asked)
			}
			withdrawn = true
		case string(m.ID) == "100":
			var r itest.CallResult
			json.Unmarshal(m.Result, &r)
			if !r.IsError || !strings.Contains(r.Text(), "timed out") {
				t.Errorf("answer %s, want a tool error saying it timed out", raw)
			}
			if asked == "" || !withdrawn {
				t.Errorf("asked %q, withdrawn %v before the answer; want both", asked, withdrawn)
			}
			if got := rec.Since(mark); len(got) != 0 {
				t.Errorf("the upstream got %d calls, want none", len(got))
			}
			return
		}
	}
}
