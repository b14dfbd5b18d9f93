package configs

import (
	"strconv"
	"strings"
	"testing"
)

func TestOverrides(t *testing.T) {
	cfg := mustParse(t, `[upstreams.github]
command = "gh"
prefix = "gh"

[upstreams.github.overrides.create_issue]
name = "new_issue"
title = "Open an issue"
description = "Open an issue in acme/web."
args = { owner = "acme", repo = "web", labels = ["bug", "triage"], draft = false, n = 3, opts = { depth = 1.5 } }

[upstreams.github.overrides."get.file"]
description = "Read a file."

[upstreams.local]
command = "srv"
prefix = ""
overrides = { run = { name = "run_it" } }
`, nil)
	gh := cfg.Upstream("github")
	o := gh.Overrides["create_issue"]
	if o == nil || o.Name != "new_issue" || o.Title != "Open an issue" || o.Description != "Open an issue in acme/web." {
		t.Fatalf("override = %+v", o)
	}
	want := map[string]string{"owner": `"acme"`, "repo": `"web"`, "labels": `["bug","triage"]`, "draft": `false`, "n": `3`, "opts": `{"depth":1.5}`}
	if len(o.Args) != len(want) {
		t.Errorf("args = %v", o.Args)
	}
	for k, v := range want {
		if string(o.Args[k]) != v {
			t.Errorf("args[%s] = %s, want %s", k, o.Args[k], v)
		}
	}
	if o := gh.Overrides["get.file"]; o == nil || o.Name != "" || o.Exposed("get.file") != "get.file" || o.Description != "Read a file." {
		t.Errorf("get.file override = %+v", o)
	}
	if o := cfg.Upstream("local").Overrides["run"]; o == nil || o.Exposed("run") != "run_it" {
		t.Errorf("inline override = %+v", o)
	}
	var none *Override
	if none.Exposed("x") != "x" {
		t.Error("a nil override renames")
	}
}

func TestOverrideErrors(t *testing.T) {
	const gh = "[upstreams.github]\ncommand = \"gh\"\nprefix = \"gh\"\n"
	tests := []struct {
		name string
		text string
		want string // substring of one error…
		line int    // …that is on this line
	}{
		{"bad name", gh + "[upstreams.github.overrides.create_issue]\nname = \"new issue\"\n",
			`upstreams.github.overrides.create_issue.name: name "new issue" may use only A-Z a-z 0-9 _ -`, 5},
		{"empty name", gh + "[upstreams.github.overrides.create_issue]\nname = \"\"\n",
			`upstreams.github.overrides.create_issue.name: name "" may use only`, 5},
		{"name too long", gh + "[upstreams.github.overrides.create_issue]\nname = \"" + strings.Repeat("x", 61) + "\"\n",
			`is exposed as "gh__xxx`, 5},
		{"empty title", gh + "[upstreams.github.overrides.create_issue]\ntitle = \" \"\n",
			`upstreams.github.overrides.create_issue.title: must not be empty`, 5},
		{"empty description", gh + "[upstreams.github.overrides.create_issue]\ndescription = \"\"\n",
			`upstreams.github.overrides.create_issue.description: must not be empty`, 5},
		{"sets nothing", gh + "[upstreams.github.overrides.create_issue]\n",
			`override of tool "create_issue" sets nothing`, 4},
		{"unknown key", gh + "[upstreams.github.overrides.create_issue]\nnam = \"x\"\n",
			`unknown key "upstreams.github.overrides.create_issue.nam" (did you mean "name"?)`, 5},
		{"args not a table", gh + "[upstreams.github.overrides.create_issue]\nargs = [\"owner\"]\n",
			`upstreams.github.overrides.create_issue.args: incompatible types`, 5},
		{"datetime argument", gh + "[upstreams.github.overrides.create_issue]\nargs = { since = 2024-01-01 }\n",
			`upstreams.github.overrides.create_issue.args.since: a TOML datetime is not a JSON value`, 5},
		{"nan argument", gh + "[upstreams.github.overrides.create_issue]\nargs = { n = nan }\n",
			`upstreams.github.overrides.create_issue.args.n: NaN is not a JSON number`, 5},
		{"arguments equal but for case", gh + "[upstreams.github.overrides.create_issue]\nargs = { owner = \"a\", Owner = \"b\" }\n",
			`are one argument to decoders that ignore case`, 5},
		{"two renames onto one name", gh + "[upstreams.github.overrides.a]\nname = \"c\"\n[upstreams.github.overrides.b]\nname = \"c\"\n",
			`upstreams.github.overrides.b.name: tool "b" would be exposed as "gh__c", like tool "a" (upstreams.github.overrides.a, line 4)`, 7},
		{"a rename onto a tool another override keeps", gh + "[upstreams.github.overrides.a]\nname = \"b\"\n[upstreams.github.overrides.b]\ntitle = \"B\"\n",
			`upstreams.github.overrides.b: tool "b" would be exposed as "gh__b", like tool "a"`, 6},
		{"two unprefixed upstreams", "[upstreams.a]\ncommand = \"x\"\nprefix = \"\"\noverrides = { t = { name = \"same\" } }\n" +
			"[upstreams.b]\ncommand = \"y\"\nprefix = \"\"\noverrides = { u = { name = \"same\" } }\n",
			`upstreams.b.overrides.u: tool "u" of upstream "b" would be exposed as "same", like tool "t" of upstream "a" (upstreams.a.overrides.t, line 4)`, 8},
		{"unprefixed into another's namespace", gh + "[upstreams.local]\ncommand = \"y\"\nprefix = \"\"\n[upstreams.local.overrides.t]\nname = \"gh__t\"\n",
			`upstreams.local.overrides.t.name: name "gh__t" of unprefixed upstream "local" is in the namespace "gh__" of upstream "github"`, 8},
		{"unprefixed into viewmux's namespace", "[upstreams.local]\ncommand = \"y\"\nprefix = \"\"\n[upstreams.local.overrides.t]\nname = \"viewmux__search_tools\"\n",
			`reserved for viewmux's own tools`, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.toml", []byte(tt.text), nil)
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.Contains(line, tt.want) {
					if want := "test.toml:" + strconv.Itoa(tt.line) + ":"; !strings.HasPrefix(line, want) {
						t.Errorf("error %q is not on line %d", line, tt.line)
					}
					return
				}
			}
			t.Errorf("no error containing %q; got:\n%v", tt.want, err)
		})
	}
}
