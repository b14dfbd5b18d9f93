//go:build unix

package protocol

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// protoOutput is what client/protocol.mjs prints (see its header comment).
type protoOutput struct {
	OK       bool            `json:"ok"`
	Scenario string          `json:"scenario"`
	Result   json.RawMessage `json:"result"`
	Error    string          `json:"error"`
	Clients  []protoClient   `json:"clients"`
}

// protoClient is what one client of a scenario received.
type protoClient struct {
	Index           int        `json:"index"`
	SessionID       *string    `json:"sessionId"`
	ProtocolVersion string     `json:"protocolVersion"`
	Notifications   []protoMsg `json:"notifications"`
	Requests        []protoMsg `json:"requests"` // server→client requests
}

// protoMsg is one notification or request as it came over the wire.
type protoMsg struct {
	T      int             `json:"t"`
	Seq    int             `json:"seq"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// protoOf returns the client's notifications (or requests, see below) of method.
func protoOf(msgs []protoMsg, method string) []protoMsg {
	var out []protoMsg
	for _, m := range msgs {
		if m.Method == method {
			out = append(out, m)
		}
	}
	return out
}

// protoOutcome is a request's outcome: a result or an error.
type protoOutcome struct {
	Result json.RawMessage   `json:"result"`
	Error  *itest.DriveError `json:"error"`
}

// protoCall is the outcome of one tools/call. T and Seq are those of its
// response on the wire (0 when none came).
type protoCall struct {
	protoOutcome
	T             int               `json:"t"`
	Seq           int               `json:"seq"`
	Progress      []json.RawMessage `json:"progress"`
	ProgressToken json.RawMessage   `json:"progressToken"`
}

// call decodes the call's result, failing the test when it has none.
func (c protoCall) call(t testing.TB, what string) itest.CallResult {
	t.Helper()
	if c.Error != nil || len(c.Result) == 0 {
		t.Fatalf("%s: no result, error %v", what, c.Error)
	}
	var r itest.CallResult
	if err := json.Unmarshal(c.Result, &r); err != nil {
		t.Fatalf("%s: decode result %s: %v", what, c.Result, err)
	}
	return r
}

// protoTexts returns the text of each content block of r, in order.
func protoTexts(r itest.CallResult) []string {
	var out []string
	for _, c := range r.Content {
		out = append(out, c.Text)
	}
	return out
}

// protoTarget is where a scenario runs: the server itself, or viewmux in
// front of it.
type protoTarget struct {
	name    string
	url     string     // streamable HTTP endpoint, or
	command []string   // a stdio server (started once per client)
	prefix  string     // of tool and prompt names
	mux     *itest.Mux // nil when direct
	// stdioUpstream: viewmux reaches the server over stdio, where a
	// server→client request carries no link to the call that caused it.
	stdioUpstream bool
}

func (tg protoTarget) params(p map[string]any) map[string]any {
	out := map[string]any{"prefix": tg.prefix}
	if tg.url != "" {
		out["url"] = tg.url
	} else {
		out["command"] = tg.command
	}
	for k, v := range p {
		out[k] = v
	}
	return out
}

// runProtocol runs client/protocol.mjs scenario with params and decodes its
// result into result. A scenario that could not run fails the test with the
// driver's output.
func runProtocol(t testing.TB, scenario string, params map[string]any, result any) protoOutput {
	t.Helper()
	itest.RequireNode(t)
	in, err := json.Marshal(params)
	if err != nil {
		t.Fatalf("encode params: %v", err)
	}
	stdout, stderr, runErr := itest.RunNodeScript(t, "protocol.mjs", in, scenario)
	var out protoOutput
	decodeErr := json.Unmarshal(stdout, &out)
	if runErr != nil || decodeErr != nil || !out.OK {
		t.Fatalf("protocol.mjs %s %s: run: %v, decode: %v\n--- stderr ---\n%s--- stdout ---\n%s",
			scenario, in, runErr, decodeErr, stderr, stdout)
	}
	if result != nil {
		if err := json.Unmarshal(out.Result, result); err != nil {
			t.Fatalf("protocol.mjs %s: decode result %s: %v", scenario, out.Result, err)
		}
	}
	return out
}

// protoConfig is an viewmux config mounting the given [upstreams.*] tables.
func protoConfig(tables ...string) string {
	return "[server]\nshutdown_grace = \"5s\"\n" + strings.Join(tables, "")
}

// protoEveryStdio mounts server-everything over stdio as "every".
func protoEveryStdio() string {
	return fmt.Sprintf(`
[upstreams.every]
command = %s
args = %s
required = true
`, itest.TomlString(itest.Harness.Node), itest.TomlArray(itest.EverythingEntry(), "stdio"))
}

// protoEveryStdioPerSession is protoEveryStdio with one child per client
// session: over stdio nothing ties server-everything's sampling,
// elicitation and roots requests to a call, so on a shared child viewmux
// refuses them.
func protoEveryStdioPerSession() string {
	return protoEveryStdio() + "scope = \"session\"\n"
}

// protoEveryHTTP mounts server-everything over streamable HTTP (at url) as
// "everyhttp".
func protoEveryHTTP(url string) string {
	return fmt.Sprintf(`
[upstreams.everyhttp]
url = %s
required = true
`, itest.TomlString(url))
}

// protoEveryHTTPPerSession is protoEveryHTTP with one connection per
// client session: server-everything sends roots/list outside any call's
// response stream, which on a shared connection nothing ties to a call.
func protoEveryHTTPPerSession(url string) string {
	return protoEveryHTTP(url) + "scope = \"session\"\n"
}

// protoConditionalTools are the tools server-everything registers after
// initialize because viewmux declares sampling, elicitation and roots: they
// reach viewmux's catalog through tools/list_changed, after readiness.
var protoConditionalTools = []string{"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"}

func protoPrefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

// protoTargets returns the targets the relay cases run against:
// server-everything itself over streamable HTTP and over stdio, viewmux
// mounting it over stdio, viewmux mounting that same HTTP server, and
// viewmux mounting it over legacy HTTP+SSE. Each
// viewmux mounts one upstream, so resource URIs and prompt names are the
// upstream's own.
func protoTargets(t *testing.T) []protoTarget {
	t.Helper()
	url := itest.StartEverythingHTTP(t)
	stdio := itest.StartMux(t, protoConfig(protoEveryStdioPerSession()))
	http := itest.StartMux(t, protoConfig(protoEveryHTTP(url)))
	sse := itest.StartMux(t, protoConfig(protoEverySSEPerSession(itest.StartEverythingSSE(t))))
	itest.WaitForTools(t, stdio.URL(), nil, protoPrefixed("every__", protoConditionalTools), 30*time.Second)
	itest.WaitForTools(t, http.URL(), nil, protoPrefixed("everyhttp__", protoConditionalTools), 30*time.Second)
	itest.WaitForTools(t, sse.URL(), nil, protoPrefixed("everysse__", protoConditionalTools), 30*time.Second)
	return []protoTarget{
		{name: "direct-http", url: url},
		{name: "direct-stdio", command: []string{itest.Harness.Node, itest.EverythingEntry(), "stdio"}},
		{name: "viewmux-stdio", url: stdio.URL(), prefix: "every__", mux: stdio, stdioUpstream: true},
		{name: "viewmux-http", url: http.URL(), prefix: "everyhttp__", mux: http},
		{name: "viewmux-sse", url: sse.URL(), prefix: "everysse__", mux: sse},
	}
}

// TestProtocolRelay drives, with the official TypeScript SDK client, what
// viewmux relays besides tools/list and tools/call, through the real binary to
// the reference server-everything (over stdio and over streamable HTTP).
// Every case runs against server-everything directly first: that run proves
// the scenario and the expectations, and is the oracle the runs through
// viewmux are compared with.
func TestProtocolRelay(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	targets := protoTargets(t)

	// each runs check against every target, the direct ones first; check
	// gets the first direct run's value (nil for that run itself) to compare
	// with.
	each := func(t *testing.T, check func(t *testing.T, tg protoTarget, oracle any) any) {
		var oracle any
		for _, tg := range targets {
			ok := t.Run(tg.name, func(t *testing.T) {
				got := check(t, tg, oracle)
				if tg.mux == nil && oracle == nil {
					oracle = got
				}
			})
			if !ok && tg.mux == nil {
				t.Fatalf("the scenario fails against server-everything directly: the test is wrong, not viewmux")
			}
		}
	}

	// sampling runs n clients at once, each with its own prompt and its own
	// answer: each sampling request must reach the client whose call caused
	// it. Where viewmux cannot tell (concurrent calls to a stdio upstream,
	// whose requests carry no link to a call), a call may instead fail with
	// the relay's clear error, but never get another client's answer.
	sampling := func(n int) func(t *testing.T) {
		return func(t *testing.T) {
			const model = "protocol-test-model"
			prompt := func(i int) string { return fmt.Sprintf("Client %d asks: which ocean is the deepest? ✓", i) }
			reply := func(i int) string { return fmt.Sprintf("The Pacific — sampled by client %d", i) }
			each(t, func(t *testing.T, tg protoTarget, oracle any) any {
				var clients []any
				for i := range n {
					clients = append(clients, map[string]any{
						"tool":     "trigger-sampling-request",
						"args":     map[string]any{"prompt": prompt(i), "maxTokens": 21 + i},
						"sampling": map[string]any{"reply": reply(i), "model": model},
					})
				}
				var res struct{ Calls []protoCall }
				out := runProtocol(t, "calls", tg.params(map[string]any{"clients": clients}), &res)
				var first json.RawMessage
				for i := range n {
					r := res.Calls[i].call(t, fmt.Sprintf("client %d", i))
					text := r.Text()
					reqs := out.Clients[i].Requests
					if n > 1 && tg.stdioUpstream && r.IsError && strings.Contains(text, "cannot tell which client session") && len(reqs) == 0 {
						t.Logf("client %d: %q (allowed: concurrent calls to a stdio upstream)", i, text)
						continue
					}
					if len(reqs) != 1 || reqs[0].Method != "sampling/createMessage" {
						t.Errorf("client %d: server→client requests = %+v, want exactly one sampling/createMessage; result %q", i, reqs, text)
						continue
					}
					var params struct {
						Messages []struct {
							Role    string
							Content struct{ Type, Text string }
						}
						SystemPrompt string
						MaxTokens    int
						Temperature  float64
					}
					protoUnmarshal(t, reqs[0].Params, &params)
					if len(params.Messages) != 1 || params.Messages[0].Role != "user" ||
						params.Messages[0].Content.Text != "Resource trigger-sampling-request context: "+prompt(i) ||
						params.SystemPrompt != "You are a helpful test server." || params.MaxTokens != 21+i || params.Temperature != 0.7 {
						t.Errorf("client %d: sampling request params = %s, want its own prompt", i, reqs[0].Params)
					}
					body, ok := strings.CutPrefix(text, "LLM sampling result: \n")
					if r.IsError || !ok {
						t.Errorf("client %d: result = %q (isError %v), want it to start with \"LLM sampling result: \\n\"", i, text, r.IsError)
						continue
					}
					// The tool returns the CreateMessageResult it got, as JSON.
					want, _ := json.Marshal(map[string]any{
						"model": model, "role": "assistant", "stopReason": "endTurn",
						"content": map[string]any{"type": "text", "text": reply(i)},
					})
					if !protoJSONEqual([]byte(body), want) {
						t.Errorf("client %d: the tool saw the answer %s, want this client's %s", i, body, want)
					}
					if i == 0 {
						first = reqs[0].Params
						if oracle != nil && !protoJSONEqual(oracle.(json.RawMessage), first) {
							t.Errorf("sampling request differs from the one server-everything sends directly:\n got %s\nwant %s", first, oracle)
						}
					}
				}
				return first
			})
		}
	}
	t.Run("sampling", sampling(1))
	t.Run("sampling, two clients at once", sampling(2))

	t.Run("sampling refused without the capability", func(t *testing.T) {
		// Directly, server-everything does not even list the tool to such a
		// client; through viewmux it is listed (viewmux declared sampling
		// upstream), and the relay must refuse instead of guessing.
		for _, tg := range targets {
			if tg.mux == nil {
				continue
			}
			t.Run(tg.name, func(t *testing.T) {
				var res struct{ Calls []protoCall }
				out := runProtocol(t, "calls", tg.params(map[string]any{"clients": []any{map[string]any{
					"tool": "trigger-sampling-request", "args": map[string]any{"prompt": "x"},
				}}}), &res)
				r := res.Calls[0].call(t, "trigger-sampling-request")
				if !r.IsError || !strings.Contains(r.Text(), "did not declare") {
					t.Errorf("result = %q (isError %v), want an error saying the client did not declare sampling", r.Text(), r.IsError)
				}
				if reqs := out.Clients[0].Requests; len(reqs) != 0 {
					t.Errorf("client without sampling got requests %+v", reqs)
				}
			})
		}
	})

	t.Run("elicitation", func(t *testing.T) {
		content := map[string]any{"name": "Ada Lovelace", "check": true, "email": "ada@example.com", "integer": 7}
		each(t, func(t *testing.T, tg protoTarget, oracle any) any {
			var res struct{ Calls []protoCall }
			out := runProtocol(t, "calls", tg.params(map[string]any{"clients": []any{map[string]any{
				"tool":        "trigger-elicitation-request",
				"elicitation": map[string]any{"action": "accept", "content": content},
			}}}), &res)
			reqs := out.Clients[0].Requests
			if len(reqs) != 1 || reqs[0].Method != "elicitation/create" {
				t.Fatalf("server→client requests = %+v, want exactly one elicitation/create", reqs)
			}
			var params struct {
				Message         string
				RequestedSchema struct {
					Type       string
					Properties map[string]json.RawMessage
					Required   []string
				}
			}
			protoUnmarshal(t, reqs[0].Params, &params)
			if params.Message != "Please provide inputs for the following fields:" || params.RequestedSchema.Type != "object" ||
				!slices.Equal(params.RequestedSchema.Required, []string{"name"}) || len(params.RequestedSchema.Properties) != 13 {
				t.Errorf("elicitation request = %s", reqs[0].Params)
			}
			r := res.Calls[0].call(t, "trigger-elicitation-request")
			texts := protoTexts(r)
			wantTexts := []string{
				"✅ User provided the requested information!",
				"User inputs:\n- Name: Ada Lovelace\n- Agreed to terms: true\n- Email: ada@example.com\n- Favorite Integer: 7",
			}
			if r.IsError || len(texts) != 3 || !slices.Equal(texts[:2], wantTexts) {
				t.Fatalf("result texts = %q (isError %v), want %q and the raw result", texts, r.IsError, wantTexts)
			}
			raw, _ := strings.CutPrefix(texts[2], "\nRaw result: ")
			wantRaw, _ := json.Marshal(map[string]any{"action": "accept", "content": content})
			if !protoJSONEqual([]byte(raw), wantRaw) {
				t.Errorf("the tool saw %s, want the client's answer %s", raw, wantRaw)
			}
			if oracle != nil && !protoJSONEqual(oracle.(json.RawMessage), reqs[0].Params) {
				t.Errorf("elicitation request differs from the one server-everything sends directly:\n got %s\nwant %s", reqs[0].Params, oracle)
			}
			return reqs[0].Params
		})
	})

	t.Run("progress", func(t *testing.T) {
		// Two clients, concurrently, each with the SDK's progress token for
		// its first call (so both send the same token), running operations of
		// different lengths: each must get exactly its own steps, under its
		// own token, before its result.
		ops := []struct {
			duration float64
			steps    int
		}{{1.2, 3}, {2, 5}}
		each(t, func(t *testing.T, tg protoTarget, _ any) any {
			var clients []any
			for _, op := range ops {
				clients = append(clients, map[string]any{
					"tool":     "trigger-long-running-operation",
					"args":     map[string]any{"duration": op.duration, "steps": op.steps},
					"progress": true,
				})
			}
			var res struct{ Calls []protoCall }
			out := runProtocol(t, "calls", tg.params(map[string]any{"clients": clients}), &res)
			tokens := map[string]bool{}
			var late []string // progress that arrived after its call's result
			for i, op := range ops {
				c := res.Calls[i]
				r := c.call(t, fmt.Sprintf("client %d", i))
				if want := fmt.Sprintf("Long running operation completed. Duration: %v seconds, Steps: %d.", op.duration, op.steps); r.Text() != want {
					t.Errorf("client %d result = %q, want %q", i, r.Text(), want)
				}
				tokens[string(c.ProgressToken)] = true
				var got []string
				for _, n := range protoOf(out.Clients[i].Notifications, "notifications/progress") {
					var p map[string]any
					protoUnmarshal(t, n.Params, &p)
					tok, _ := json.Marshal(p["progressToken"])
					got = append(got, fmt.Sprintf("%v/%v token %s", p["progress"], p["total"], tok))
					if len(p) != 3 {
						t.Errorf("client %d: progress params %s, want exactly progress, total, progressToken", i, n.Params)
					}
					if n.Seq > c.Seq {
						late = append(late, fmt.Sprintf("client %d: progress %s arrived after the tool result (message #%d, result #%d)", i, n.Params, n.Seq, c.Seq))
					}
				}
				var want []string
				for s := 1; s <= op.steps; s++ {
					want = append(want, fmt.Sprintf("%d/%d token %s", s, op.steps, c.ProgressToken))
				}
				if !slices.Equal(got, want) {
					t.Errorf("client %d got progress %q, want exactly %q", i, got, want)
				}
			}
			if len(tokens) != 1 {
				t.Errorf("the clients used tokens %v; the case needs them equal", tokens)
			}
			t.Run("all before the result", func(t *testing.T) {
				// The SDK drops progress that comes after the result: a
				// client never sees those steps (spec: progress stops
				// after completion).
				for _, l := range late {
					t.Error(l)
				}
			})
			return nil
		})
	})

	t.Run("cancellation", func(t *testing.T) {
		// Cancel a 10 s operation once it has reported progress; then the
		// same session must still be served, including a sampling request
		// from the same upstream, while the cancelled operation may still be
		// running there.
		each(t, func(t *testing.T, tg protoTarget, _ any) any {
			var res struct {
				ProgressBeforeAbort []json.RawMessage
				Aborted             bool
				RejectedAfterMs     int
				Error               *itest.DriveError
				Result              json.RawMessage
				Then                []protoCall
			}
			start := time.Now()
			runProtocol(t, "cancel", tg.params(map[string]any{
				"client":             map[string]any{"sampling": map[string]any{"reply": "still answering"}},
				"tool":               "trigger-long-running-operation",
				"args":               map[string]any{"duration": 10, "steps": 20},
				"abortAfterProgress": 1,
				"then": []any{
					map[string]any{"tool": "echo", "args": map[string]any{"message": "after cancel"}},
					map[string]any{"tool": "trigger-sampling-request", "args": map[string]any{"prompt": "after cancel"}},
				},
			}), &res)
			if !res.Aborted || len(res.ProgressBeforeAbort) != 1 || res.Error == nil || len(res.Result) != 0 {
				t.Fatalf("aborted=%v progress before abort %s, error %v, result %s: want aborted after 1 progress, rejected",
					res.Aborted, res.ProgressBeforeAbort, res.Error, res.Result)
			}
			if res.RejectedAfterMs > 1000 {
				t.Errorf("the call rejected %d ms after the abort, want promptly", res.RejectedAfterMs)
			}
			if len(res.Then) != 2 {
				t.Fatalf("got %d follow-up calls, want 2", len(res.Then))
			}
			if got := res.Then[0].call(t, "echo").Text(); got != "Echo: after cancel" {
				t.Errorf("echo after the cancellation = %q", got)
			}
			if got := res.Then[1].call(t, "trigger-sampling-request").Text(); !strings.Contains(got, `"text": "still answering"`) {
				t.Errorf("sampling after the cancellation = %q, want the client's answer in it", got)
			}
			if d := time.Since(start); d > 8*time.Second {
				t.Errorf("the scenario took %v: the cancelled 10 s operation held things up", d)
			}
			return nil
		})
	})

	t.Run("resource links", func(t *testing.T) {
		each(t, func(t *testing.T, tg protoTarget, oracle any) any {
			var res struct {
				Call  protoCall
				Reads []struct {
					URI string
					protoOutcome
				}
			}
			runProtocol(t, "resourceLinks", tg.params(map[string]any{"count": 4}), &res)
			var call struct {
				Content []struct {
					Type, Text, URI, Name, Description, MimeType string
				}
			}
			protoUnmarshal(t, res.Call.Result, &call)
			var links []string
			for _, c := range call.Content {
				if c.Type == "resource_link" {
					links = append(links, c.URI)
				}
			}
			wantLinks := []string{"demo://resource/dynamic/blob/1", "demo://resource/dynamic/text/2", "demo://resource/dynamic/blob/3", "demo://resource/dynamic/text/4"}
			if !slices.Equal(links, wantLinks) {
				t.Fatalf("resource links = %v, want %v", links, wantLinks)
			}
			if oracle != nil && !protoJSONEqual(oracle.(json.RawMessage), res.Call.Result) {
				t.Errorf("get-resource-links result differs from server-everything's own:\n got %s\nwant %s", res.Call.Result, oracle)
			}
			if len(res.Reads) != len(links) {
				t.Fatalf("read %d links, want %d", len(res.Reads), len(links))
			}
			for i, rd := range res.Reads {
				if rd.Error != nil {
					t.Errorf("reading %s: %v", rd.URI, rd.Error)
					continue
				}
				var got struct {
					Contents []struct{ URI, MimeType, Text, Blob string }
				}
				protoUnmarshal(t, rd.Result, &got)
				if len(got.Contents) != 1 || got.Contents[0].URI != rd.URI || got.Contents[0].MimeType != "text/plain" {
					t.Errorf("reading %s = %s", rd.URI, rd.Result)
					continue
				}
				c := got.Contents[0]
				id := i + 1
				text, want := c.Text, fmt.Sprintf(`^Resource %d: This is a plaintext resource created at \S`, id)
				if strings.Contains(rd.URI, "/blob/") {
					b, err := base64.StdEncoding.DecodeString(c.Blob)
					if err != nil || c.Text != "" {
						t.Errorf("reading %s: blob %q text %q", rd.URI, c.Blob, c.Text)
					}
					text, want = string(b), fmt.Sprintf(`^Resource %d: This is a base64 blob created at \S`, id)
				}
				if !regexp.MustCompile(want).MatchString(text) {
					t.Errorf("reading %s: content %q does not match %s", rd.URI, text, want)
				}
			}
			return res.Call.Result
		})
	})

	t.Run("resource subscription", func(t *testing.T) {
		const uri = "demo://resource/static/document/features.md"
		each(t, func(t *testing.T, tg protoTarget, _ any) any {
			var res struct {
				Subscribe, Unsubscribe protoOutcome
				Toggles                []protoCall
				Updated                json.RawMessage
				AfterUnsubscribe       []json.RawMessage
			}
			out := runProtocol(t, "subscribe", tg.params(map[string]any{"uri": uri, "quietMs": 1000}), &res)
			if res.Subscribe.Error != nil || res.Unsubscribe.Error != nil {
				t.Fatalf("subscribe: %v, unsubscribe: %v", res.Subscribe.Error, res.Unsubscribe.Error)
			}
			for i, c := range res.Toggles {
				if r := c.call(t, "toggle-subscriber-updates"); r.IsError {
					t.Errorf("toggle %d: %q", i, r.Text())
				}
			}
			if want := fmt.Sprintf(`{"uri":%q}`, uri); !protoJSONEqual(res.Updated, []byte(want)) {
				t.Errorf("subscriber got notifications/resources/updated %s, want %s", res.Updated, want)
			}
			if len(res.AfterUnsubscribe) != 0 {
				t.Errorf("after unsubscribing, the client still got updates %s", res.AfterUnsubscribe)
			}
			if got := protoOf(out.Clients[1].Notifications, "notifications/resources/updated"); len(got) != 0 {
				t.Errorf("a client that did not subscribe got %+v", got)
			}
			return nil
		})
	})

	t.Run("logging", func(t *testing.T) {
		// toggle-simulated-logging sends one random-level message at once
		// (then every 5 s, which the case stops before). Level debug lets
		// every level through.
		wantData := map[string]string{
			"debug": "Debug-level message", "info": "Info-level message", "notice": "Notice-level message",
			"warning": "Warning-level message", "error": "Error-level message", "critical": "Critical-level message",
			"alert": "Alert level-message", "emergency": "Emergency-level message",
		}
		each(t, func(t *testing.T, tg protoTarget, oracle any) any {
			var res struct {
				SetLevel protoOutcome
				Toggles  []protoCall
				Message  json.RawMessage
			}
			out := runProtocol(t, "logging", tg.params(map[string]any{"level": "debug", "waitMs": 4000}), &res)
			if res.SetLevel.Error != nil {
				t.Fatalf("logging/setLevel: %v", res.SetLevel.Error)
			}
			for i, c := range res.Toggles {
				if r := c.call(t, "toggle-simulated-logging"); r.IsError {
					t.Errorf("toggle %d: %q", i, r.Text())
				}
			}
			if len(res.Message) == 0 || string(res.Message) == "null" {
				t.Fatalf("the calling client got no notifications/message")
			}
			var msg map[string]any
			protoUnmarshal(t, res.Message, &msg)
			level, _ := msg["level"].(string)
			data, _ := msg["data"].(string)
			base, known := wantData[level]
			if !known || (data != base && !strings.HasPrefix(data, base+" - SessionId ")) {
				t.Errorf("log message %s: level and data do not match server-everything's messages", res.Message)
			}
			if got := protoOf(out.Clients[1].Notifications, "notifications/message"); len(got) != 0 {
				t.Errorf("a client that made no call got log messages %+v", got)
			}
			keys := slices.Sorted(maps.Keys(msg))
			if oracle != nil {
				t.Run("fields as sent", func(t *testing.T) {
					if !slices.Equal(keys, oracle.([]string)) {
						t.Errorf("log message params %s have fields %v; server-everything sends %v (viewmux must forward them as they are)", res.Message, keys, oracle)
					}
				})
			}
			return keys
		})
	})

	t.Run("prompts", func(t *testing.T) {
		gets := []any{
			map[string]any{"name": "args-prompt", "args": map[string]any{"city": "Paris", "state": "TX"}},
			map[string]any{"name": "args-prompt", "args": map[string]any{"city": "Oslo"}},
			map[string]any{"name": "simple-prompt"},
			map[string]any{"name": "completable-prompt", "args": map[string]any{"department": "Sales", "name": "Eve"}},
			map[string]any{"name": "resource-prompt", "args": map[string]any{"resourceType": "Text", "resourceId": "3"}},
		}
		wantText := []string{
			"What's weather in Paris, TX?",
			"What's weather in Oslo?",
			"This is a simple prompt without arguments.",
			"Please promote Eve to the head of the Sales team.",
			"This prompt includes the Text resource with id: 3. Please analyze the following resource:",
		}
		type promptArg struct {
			Name, Description string
			Required          bool
		}
		type prompt struct {
			Name, Title, Description string
			Arguments                []promptArg
		}
		each(t, func(t *testing.T, tg protoTarget, oracle any) any {
			var res struct {
				Prompts []prompt
				Names   []string
				Gets    []protoOutcome
			}
			runProtocol(t, "prompts", tg.params(map[string]any{"get": gets}), &res)
			wantNames := protoPrefixed(tg.prefix, []string{"args-prompt", "completable-prompt", "resource-prompt", "simple-prompt"})
			if got := slices.Sorted(slices.Values(res.Names)); !slices.Equal(got, wantNames) {
				t.Errorf("prompts = %v, want %v", got, wantNames)
			}
			listed := map[string]prompt{}
			for _, p := range res.Prompts {
				p.Name = strings.TrimPrefix(p.Name, tg.prefix)
				listed[p.Name] = p
			}
			if oracle != nil && !reflect.DeepEqual(listed, oracle) {
				t.Errorf("prompts (unprefixed) = %+v\nwant as server-everything lists them: %+v", listed, oracle)
			}
			for i, g := range res.Gets {
				if g.Error != nil {
					t.Errorf("prompts/get %v: %v", gets[i], g.Error)
					continue
				}
				var got struct {
					Messages []struct {
						Role    string
						Content struct {
							Type, Text string
							Resource   struct{ URI, Text string }
						}
					}
				}
				protoUnmarshal(t, g.Result, &got)
				if len(got.Messages) == 0 || got.Messages[0].Role != "user" || got.Messages[0].Content.Text != wantText[i] {
					t.Errorf("prompts/get %v = %s, want first message %q", gets[i], g.Result, wantText[i])
				}
				if i == 4 && (len(got.Messages) != 2 || got.Messages[1].Content.Type != "resource" ||
					got.Messages[1].Content.Resource.URI != "demo://resource/dynamic/text/3" ||
					!strings.HasPrefix(got.Messages[1].Content.Resource.Text, "Resource 3: This is a plaintext resource created at ")) {
					t.Errorf("resource-prompt = %s, want the embedded text resource 3", g.Result)
				}
			}
			return listed
		})
	})

	t.Run("completion", func(t *testing.T) {
		reqs := []any{
			map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "completable-prompt"},
				"argument": map[string]any{"name": "department", "value": ""}},
			map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "completable-prompt"},
				"argument": map[string]any{"name": "department", "value": "Ma"}},
			map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "completable-prompt"},
				"argument": map[string]any{"name": "name", "value": ""},
				"context":  map[string]any{"arguments": map[string]any{"department": "Sales"}}},
			map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "completable-prompt"},
				"argument": map[string]any{"name": "name", "value": "B"},
				"context":  map[string]any{"arguments": map[string]any{"department": "Engineering"}}},
			map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "resource-prompt"},
				"argument": map[string]any{"name": "resourceType", "value": "B"}},
			map[string]any{"ref": map[string]any{"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"},
				"argument": map[string]any{"name": "resourceId", "value": "42"}},
			map[string]any{"ref": map[string]any{"type": "ref/resource", "uri": "demo://resource/dynamic/blob/{resourceId}"},
				"argument": map[string]any{"name": "resourceId", "value": "x"}},
		}
		want := [][]string{
			{"Engineering", "Sales", "Marketing", "Support"},
			{"Marketing"},
			{"David", "Eve", "Frank"},
			{"Bob"},
			{"Blob"},
			{"42"},
			{},
		}
		each(t, func(t *testing.T, tg protoTarget, _ any) any {
			var res struct{ Completions []protoOutcome }
			runProtocol(t, "complete", tg.params(map[string]any{"requests": reqs}), &res)
			if len(res.Completions) != len(want) {
				t.Fatalf("got %d completions, want %d", len(res.Completions), len(want))
			}
			for i, c := range res.Completions {
				if c.Error != nil {
					t.Errorf("completion/complete %v: %v", reqs[i], c.Error)
					continue
				}
				var got struct {
					Completion struct {
						Values  []string
						Total   *int
						HasMore bool
					}
				}
				protoUnmarshal(t, c.Result, &got)
				v := got.Completion
				if !slices.Equal(v.Values, want[i]) || v.HasMore || (v.Total != nil && *v.Total != len(want[i])) {
					t.Errorf("completion/complete %v = %s, want values %q", reqs[i], c.Result, want[i])
				}
			}
			return nil
		})
	})
}

// TestProtocolRoots checks that roots/list from an upstream is answered by
// the client whose call caused it: two clients with different roots call
// get-roots-list at the same time, one through server-everything over stdio,
// the other through the same server over streamable HTTP. server-everything
// caches the first roots it gets per session, so this runs on an viewmux of
// its own that nothing else has called.
func TestProtocolRoots(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	url := itest.StartEverythingHTTP(t)
	mux := itest.StartMux(t, protoConfig(protoEveryStdioPerSession(), protoEveryHTTPPerSession(url)))
	itest.WaitForTools(t, mux.URL(), nil, []string{"every__get-roots-list", "everyhttp__get-roots-list"}, 30*time.Second)

	roots := [][]map[string]any{
		{{"uri": "file:///work/alpha-project", "name": "Alpha"}},
		{{"uri": "file:///srv/beta-data", "name": "Beta"}, {"uri": "file:///srv/beta-logs", "name": "Beta logs"}},
	}
	for _, tc := range []struct {
		name     string
		url      string
		prefixes []string
	}{
		{"direct", url, []string{"", ""}},
		{"viewmux", mux.URL(), []string{"every__", "everyhttp__"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clients []any
			for i, r := range roots {
				clients = append(clients, map[string]any{"prefix": tc.prefixes[i], "tool": "get-roots-list", "roots": r})
			}
			var res struct{ Calls []protoCall }
			out := runProtocol(t, "calls", map[string]any{"url": tc.url, "clients": clients}, &res)
			for i, r := range roots {
				text := res.Calls[i].call(t, fmt.Sprintf("client %d", i)).Text()
				var lines []string
				for j, root := range r {
					lines = append(lines, fmt.Sprintf("%d. %s\n   URI: %s", j+1, root["name"], root["uri"]))
				}
				want := fmt.Sprintf("Current MCP Roots (%d total):\n\n%s\n\n", len(r), strings.Join(lines, "\n\n"))
				if !strings.HasPrefix(text, want) {
					t.Errorf("client %d (%s) got %q, want its own roots: %q…", i, tc.prefixes[i]+"get-roots-list", text, want)
				}
				// One, or two when server-everything's own roots sync, 350 ms
				// after initialize, overlaps the call.
				if got := protoOf(out.Clients[i].Requests, "roots/list"); len(got) == 0 {
					t.Errorf("client %d was never asked for its roots", i)
				}
			}
		})
	}
}

func protoUnmarshal(t testing.TB, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}

// protoJSONEqual reports whether a and b are the same JSON value (object key
// order aside).
func protoJSONEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
