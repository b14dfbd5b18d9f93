package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/internal/demo"
)

// TestCheckReportsDynamicProfiles runs `viewmux check` and `viewmux tools`
// over a real demo server: a dynamic profile's line gives its initial
// tools/list (viewmux's three tools, the demo's tools outside its one
// toolset) against the full one.
func TestCheckReportsDynamicProfiles(t *testing.T) {
	path := writeConfig(t, demoUpstream(t, "demo", "demo-server", "--name", "demo")+`
[upstreams.demo.toolsets]
notes = ["*_note", "list_notes"]

[profiles.dyn]
dynamic_toolsets = true

[profiles.static]
`)
	line := regexp.MustCompile(`profile "dyn" is dynamic: initial (\d+) tools ~(\d+) tokens, full (\d+) tools ~(\d+) tokens`)
	for _, args := range [][]string{{"check", "--config", path}, {"tools", "--config", path, "--profile", "dyn"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s%s", args[0], code, stdout.String(), stderr.String())
		}
		m := line.FindStringSubmatch(stdout.String())
		if m == nil || strings.Contains(stdout.String(), `profile "static" is dynamic`) {
			t.Fatalf("%s: no dynamic line for dyn alone:\n%s", args[0], stdout.String())
		}
		n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
		// The demo has 7 tools, 4 of them notes tools. (With so few tools
		// the initial list costs more than the full one: see README.)
		if n(1) != 3+3 || n(3) != 7 || n(2) <= 0 || n(4) <= 0 || n(2) == n(4) {
			t.Fatalf("%s: %q", args[0], m[0])
		}
	}
}

// TestToolsJSONIsTheListing runs `viewmux tools --json` over a real demo
// server: each definition printed is the demo's own, as its tools/list
// sends it, but for the exposed name and viewmux's _meta keys.
func TestToolsJSONIsTheListing(t *testing.T) {
	path := writeConfig(t, demoUpstream(t, "demo", "demo-server", "--name", "demo"))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"tools", "--json", "--config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	var printed struct{ Tools []map[string]json.RawMessage }
	if err := json.Unmarshal(stdout.Bytes(), &printed); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	direct := demo.NewServer("demo").HandleMessage(context.Background(), []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	b, err := json.Marshal(direct)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Result struct{ Tools []map[string]json.RawMessage }
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res.Result.Tools) == 0 {
		t.Fatalf("demo tools/list: %v %s", err, b)
	}
	want := map[string]map[string]json.RawMessage{}
	for _, tool := range res.Result.Tools {
		var name string
		json.Unmarshal(tool["name"], &name)
		want[name] = tool
	}
	if len(printed.Tools) != len(want) {
		t.Fatalf("%d tools printed, the demo lists %d", len(printed.Tools), len(want))
	}
	for _, got := range printed.Tools {
		var meta map[string]string
		json.Unmarshal(got["_meta"], &meta)
		w, ok := want[meta["viewmux/original"]]
		if !ok {
			t.Errorf("printed tool %s is not the demo's (_meta %s)", got["name"], got["_meta"])
			continue
		}
		for k, v := range w {
			if k == "name" {
				continue
			}
			var c bytes.Buffer
			json.Compact(&c, got[k])
			if c.String() != string(v) {
				t.Errorf("tool %s, %s:\n printed %s\n demo    %s", meta["viewmux/original"], k, c.String(), v)
			}
		}
		for k := range got {
			if _, ok := w[k]; !ok && k != "_meta" && k != "title" {
				t.Errorf("tool %s: %q printed, the demo sent none", meta["viewmux/original"], k)
			}
		}
	}
}

// TestToolsShowsApproval runs `viewmux tools` over a real demo server: the
// APPROVE column says which tools of the profile need a person's approval,
// and how long a call waits for it.
func TestToolsShowsApproval(t *testing.T) {
	path := writeConfig(t, demoUpstream(t, "demo", "demo-server", "--name", "demo")+`
[profiles.agent]
approve = ["*__delete_*"]
approve_timeout = "45s"
`)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"tools", "--config", path, "--profile", "agent"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(l); len(f) >= 4 {
			rows[f[0]] = f
		}
	}
	if h := rows["TOOL"]; len(h) < 4 || h[3] != "APPROVE" {
		t.Fatalf("header %v, want an APPROVE column:\n%s", h, stdout.String())
	}
	if r := rows["demo__delete_note"]; len(r) < 5 || r[3] != "yes," || r[4] != "45s" {
		t.Errorf("demo__delete_note: %v, want approval with 45s", r)
	}
	if r := rows["demo__write_note"]; len(r) < 4 || r[3] != "-" {
		t.Errorf("demo__write_note: %v, want no approval", r)
	}
}

// TestCheckReportsToolSearchProfiles: a tool_search profile's line gives
// its initial tools/list (the two search tools and the pinned one) against
// the full one.
func TestCheckReportsToolSearchProfiles(t *testing.T) {
	path := writeConfig(t, demoUpstream(t, "demo", "demo-server", "--name", "demo")+`
[profiles.agent]
tool_search = true
tool_search_pinned = ["demo__echo"]

[profiles.static]
`)
	line := regexp.MustCompile(`profile "agent" searches its tools: initial (\d+) tools ~(\d+) tokens, full (\d+) tools ~(\d+) tokens`)
	for _, args := range [][]string{{"check", "--config", path}, {"tools", "--config", path, "--profile", "agent"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s%s", args[0], code, stdout.String(), stderr.String())
		}
		m := line.FindStringSubmatch(stdout.String())
		if m == nil || strings.Contains(stdout.String(), `profile "static" searches`) {
			t.Fatalf("%s: no tool_search line for agent alone:\n%s", args[0], stdout.String())
		}
		n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
		if n(1) != 2+1 || n(3) != 7 || n(2) <= 0 || n(4) <= 0 {
			t.Fatalf("%s: %q", args[0], m[0])
		}
	}
}
