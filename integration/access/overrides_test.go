//go:build unix

package access

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// Tool overrides ([upstreams.U.overrides.TOOL]) against a recording
// upstream, on every door: the overridden definition is what clients
// list and what the profile's globs and call rules see, fixed arguments
// arrive injected, and a call that sends one is refused before anything
// reaches the upstream.

// overridesConfig renames the recorder's run to git_status with its
// command fixed, and echo to say with two fixed arguments. The profile
// knows only the new names; its call rule on git_status requires the
// command, which only the injected one supplies.
func overridesConfig(rec *itest.Recorder) string {
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"
default_profile = %[2]q

[upstreams.rec]
url = %[1]s
required = true
call_timeout = "5s"

[upstreams.rec.overrides.run]
name = "git_status"
title = "Git status"
description = "Shows the status of the repository."
args = { command = "git status" }

[upstreams.rec.overrides.echo]
name = "say"
args = { kind = "fixed", n = 3 }

[profiles.%[2]s]
allow = ["rec__git_*", "rec__say"]

[[profiles.%[2]s.call_rules]]
tool = "rec__git_status"
args = { command = ["git status"] }
`, itest.TomlString(rec.URL), itest.RecProfile)
}

// TestOverridesFixedArguments is the recording upstream's proof for
// overrides: what it is sent for each call, and that it is sent nothing
// for a call that tries to set a fixed argument.
func TestOverridesFixedArguments(t *testing.T) {
	rec := itest.StartRecorder(t, "rec", false)
	mux := itest.StartMux(t, overridesConfig(rec))
	cfgPath := filepath.Join(mux.Dir, "viewmux.toml")
	barriers := 0
	// nothingForwarded sends an allowed call and checks that it is the
	// only routed request rec got since mark, and that token reached it
	// in no request.
	nothingForwarded := func(t *testing.T, c itest.RecClient, mark int, token string) {
		t.Helper()
		barriers++
		b := fmt.Sprintf("barrier-%d-%s", barriers, itest.RandomHex(t, 4))
		if a := c.Do(t, "tools/call", `{"name":"rec__say","_meta":{"barrier":"`+b+`"}}`); a.Msg.Error != nil {
			t.Fatalf("the barrier call failed: %s", a)
		}
		if got := rec.Since(mark); len(got) != 1 || !bytes.Contains(got[0].Body, []byte(b)) {
			t.Errorf("rec was sent %d request(s), want only the barrier:\n%s", len(got), itest.RecDescribe(got))
		}
		if got := rec.Containing(token); len(got) > 0 {
			t.Errorf("the refused call reached the upstream:\n%s", itest.RecDescribe(got))
		}
	}
	for _, d := range itest.RecDoors(mux, cfgPath, nil) {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)

			t.Run("listed as overridden", func(t *testing.T) {
				a := c.Do(t, "tools/list", `{}`)
				var res struct {
					Tools []json.RawMessage `json:"tools"`
				}
				if a.Msg.Error != nil || json.Unmarshal(a.Msg.Result, &res) != nil {
					t.Fatalf("tools/list: %s", a)
				}
				byName := map[string]map[string]json.RawMessage{}
				for _, raw := range res.Tools {
					var tool map[string]json.RawMessage
					json.Unmarshal(raw, &tool)
					var name string
					json.Unmarshal(tool["name"], &name)
					byName[name] = tool
				}
				if len(byName) != 2 || byName["rec__git_status"] == nil || byName["rec__say"] == nil {
					t.Fatalf("listed %v; want rec__git_status and rec__say only (the globs see the new names)", keys(byName))
				}
				git := byName["rec__git_status"]
				for member, want := range map[string]string{
					"title":       `"Git status"`,
					"description": `"Shows the status of the repository."`,
					"inputSchema": `{"type":"object","properties":{},"required":[]}`,
				} {
					if !itest.RecSameJSON(git[member], []byte(want)) {
						t.Errorf("rec__git_status %s = %s, want %s", member, git[member], want)
					}
				}
				var meta map[string]json.RawMessage
				json.Unmarshal(git["_meta"], &meta)
				if string(meta["viewmux/original"]) != `"run"` || string(meta["viewmux/upstream"]) != `"rec"` {
					t.Errorf("rec__git_status _meta = %s, want the upstream's name run", git["_meta"])
				}
				if !itest.RecSameJSON(byName["rec__say"]["inputSchema"], []byte(`{"type":"object"}`)) ||
					!itest.RecSameJSON(byName["rec__say"]["description"], []byte(`"answers a canned result"`)) {
					t.Errorf("rec__say: %s %s", byName["rec__say"]["inputSchema"], byName["rec__say"]["description"])
				}
			})

			t.Run("fixed arguments arrive injected", func(t *testing.T) {
				for _, tc := range []struct{ name, params, tool, args string }{
					{"the call rule sees the injected command", `{"name":"rec__git_status","arguments":{}}`, "run", `{"command":"git status"}`},
					{"no arguments at all", `{"name":"rec__say"}`, "echo", `{"kind":"fixed","n":3}`},
					{"null arguments", `{"name":"rec__say","arguments":null}`, "echo", `{"kind":"fixed","n":3}`},
					{"after the client's own, which keep their bytes", `{"name":"rec__say","arguments":{"text":"h\u00e9 \"q\"","big":12345678901234567890}}`,
						"echo", `{"text":"h\u00e9 \"q\"","big":12345678901234567890,"kind":"fixed","n":3}`},
				} {
					t.Run(tc.name, func(t *testing.T) {
						mark := rec.Mark()
						if a := c.Do(t, "tools/call", tc.params); a.Msg.Error != nil || a.Msg.Result == nil {
							t.Fatalf("tools/call %s: %s", tc.params, a)
						}
						got := rec.Since(mark)
						if len(got) != 1 {
							t.Fatalf("rec was sent %d requests:\n%s", len(got), itest.RecDescribe(got))
						}
						p := got[0].Params(t)
						var args bytes.Buffer
						if err := json.Compact(&args, p["arguments"]); err != nil {
							t.Fatalf("forwarded arguments %s: %v", p["arguments"], err)
						}
						if string(p["name"]) != `"`+tc.tool+`"` || args.String() != tc.args {
							t.Errorf("forwarded name %s arguments %s; want %q %s", p["name"], args.String(), tc.tool, tc.args)
						}
					})
				}
			})

			t.Run("a fixed argument from the client is refused", func(t *testing.T) {
				for i, tc := range []struct{ name, params string }{
					{"the fixed argument", `{"name":"rec__git_status","arguments":{"command":"rm -rf /tmp/TOKEN"}}`},
					{"the fixed value itself", `{"name":"rec__git_status","arguments":{"command":"git status","x":"TOKEN"}}`},
					{"in another case", `{"name":"rec__git_status","arguments":{"Command":"rm -rf /tmp/TOKEN"}}`},
					{"spelled with an escape", `{"name":"rec__git_status","arguments":{"comm\u0061nd":"rm -rf /tmp/TOKEN"}}`},
					{"one of two", `{"name":"rec__say","arguments":{"text":"TOKEN","N":4}}`},
					{"in capitals", `{"name":"rec__say","arguments":{"KIND":"TOKEN"}}`},
				} {
					t.Run(tc.name, func(t *testing.T) {
						token := fmt.Sprintf("tok%d%s", i, itest.RandomHex(t, 6))
						params := strings.ReplaceAll(tc.params, "TOKEN", token)
						mark := rec.Mark()
						a := c.Do(t, "tools/call", params)
						if e := a.Msg.Error; e == nil || e.Code != mcp.INVALID_PARAMS || !strings.Contains(e.Message, "fixed by the gateway") {
							t.Errorf("tools/call %s: got %s, want error -32602 naming the fixed argument", params, a)
						}
						if d.Modern && a.Status != 400 {
							t.Errorf("2026-07-28 refusal came with HTTP %d, want 400", a.Status)
						}
						nothingForwarded(t, c, mark, token)
					})
				}
			})

			t.Run("the upstream's names are not exposed", func(t *testing.T) {
				for _, name := range []string{"rec__run", "rec__echo"} {
					mark := rec.Mark()
					token := itest.RandomHex(t, 8)
					a := c.Do(t, "tools/call", `{"name":"`+name+`","arguments":{"command":"git status","x":"`+token+`"}}`)
					if e := a.Msg.Error; e == nil || e.Code != mcp.METHOD_NOT_FOUND {
						t.Errorf("tools/call %s: got %s, want -32601", name, a)
					}
					nothingForwarded(t, c, mark, token)
				}
			})
		})
	}
}

// TestOverridesSDKClient drives the official TypeScript SDK client
// through every door against the overridden tools: it lists them as
// overridden, its calls arrive with the fixed arguments injected, and its
// call that sends one is refused, never reaching the upstream.
func TestOverridesSDKClient(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	rec := itest.StartRecorder(t, "rec", false)
	mux := itest.StartMux(t, overridesConfig(rec))
	cfgPath := filepath.Join(mux.Dir, "viewmux.toml")
	httpDoor := itest.Door{Name: "http", Script: func(steps []itest.Op) itest.DoorScript {
		return itest.DoorScript{Script: itest.Script{URL: mux.URL() + "?profile=" + itest.RecProfile, Steps: steps}}
	}}
	for _, d := range append([]itest.Door{httpDoor}, itest.DoorsFor(mux, cfgPath, mux.Marker, itest.RecProfile)...) {
		t.Run(d.Name, func(t *testing.T) {
			token := itest.RandomHex(t, 8)
			mark := rec.Mark()
			c := itest.DriveDoor(t, d.Script([]itest.Op{
				itest.OpList(),
				itest.OpCall("rec__say", map[string]any{"text": token}),
				itest.OpCallExpectError("rec__say", map[string]any{"text": "refused-" + token, "kind": "refused-" + token}),
			})).Clients[0]
			var say *itest.Tool
			for i, tool := range c.Steps[0].Tools {
				if tool.Name == "rec__say" {
					say = &c.Steps[0].Tools[i]
				}
			}
			if say == nil || string(say.Meta["viewmux/original"]) != `"echo"` {
				t.Fatalf("rec__say is not listed with its original name in _meta: %+v", c.Steps[0].Tools)
			}
			if e := c.Steps[2].Error; e == nil || e.Code == nil || *e.Code != mcp.INVALID_PARAMS || !strings.Contains(e.Message, "fixed by the gateway") {
				t.Errorf("the call sending kind got %v, want -32602 naming the fixed argument", e)
			}
			got := rec.Since(mark)
			if len(got) != 1 {
				t.Fatalf("rec was sent %d calls, want 1:\n%s", len(got), itest.RecDescribe(got))
			}
			var args map[string]any
			json.Unmarshal(got[0].Params(t)["arguments"], &args)
			if args["text"] != token || args["kind"] != "fixed" || args["n"] != float64(3) || len(args) != 3 {
				t.Errorf("forwarded arguments %v, want text plus the fixed kind and n", args)
			}
			if refused := rec.Containing("refused-" + token); len(refused) > 0 {
				t.Errorf("the refused call reached the upstream:\n%s", itest.RecDescribe(refused))
			}
			if d.Name == "stdio" {
				itest.CheckStdioExit(t, c)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
