//go:build unix

package lifecycle

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestQuickstart runs `viewmux serve` on a fresh machine: no config file
// anywhere, so the embedded quickstart (two demo upstreams, notes and
// scratch, plus default and readonly profiles) is used.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	mux := itest.StartMuxWith(t, itest.MuxOptions{
		Dir: t.TempDir(),
		Env: []string{"HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + t.TempDir()},
	})
	upstreams := []string{"notes", "scratch"}

	t.Run("logged as the quickstart", func(t *testing.T) {
		if !strings.Contains(strings.ToLower(mux.Stderr()), "quickstart") {
			t.Errorf("stderr does not say the embedded quickstart config is used:\n%s", mux.Stderr())
		}
	})

	var list itest.StepResult
	t.Run("tools", func(t *testing.T) {
		// The demo upstreams need not be `required`, so /readyz may come
		// before their tools do.
		want := itest.Prefixed(upstreams, itest.DemoTools)
		list = itest.WaitForTools(t, mux.URL(), nil, want, 15*time.Second)
		got := slices.Sorted(slices.Values(list.Names))
		if !slices.Equal(got, want) {
			t.Fatalf("tools/list = %v, want %v", got, want)
		}
		for _, name := range got {
			tool := list.Tool(name)
			_, orig, _ := strings.Cut(name, "__")
			wantRO := slices.Contains(itest.DemoReadOnly, orig)
			if ro := tool.Annotations != nil && itest.IsTrue(tool.Annotations.ReadOnlyHint); ro != wantRO {
				t.Errorf("%s readOnlyHint = %v, want %v (annotations %+v)", name, ro, wantRO, tool.Annotations)
			}
			if orig == "delete_note" && (tool.Annotations == nil || !itest.IsTrue(tool.Annotations.DestructiveHint)) {
				t.Errorf("%s should have destructiveHint true, annotations %+v", name, tool.Annotations)
			}
		}
	})

	t.Run("write then read a note", func(t *testing.T) {
		if list.Tool("notes__write_note") == nil || list.Tool("notes__read_note") == nil {
			t.Skip("tools subtest failed: write_note/read_note not listed")
		}
		writeArgs, readArgs, wantInRead := noteArgs(t, list.Tool("notes__write_note"), list.Tool("notes__read_note"))
		res := itest.Drive(t, itest.Script{URL: mux.URL(), Steps: []itest.Op{
			itest.OpCall("notes__write_note", writeArgs),
			itest.OpCall("notes__read_note", readArgs),
		}})
		steps := res.Steps(t)
		if w := steps[0].Call(t); w.IsError {
			t.Fatalf("write_note(%v) returned an error result: %q", writeArgs, w.Text())
		}
		r := steps[1].Call(t)
		for _, v := range wantInRead {
			if r.IsError || !strings.Contains(r.Text(), v) {
				t.Errorf("read_note(%v) = %q (isError %v), want it to contain %q", readArgs, r.Text(), r.IsError, v)
			}
		}
		// The two demo upstreams are separate servers with separate stores:
		// scratch must not have the note, whether it says so with an error
		// result or a JSON-RPC error.
		other, stderr, _ := itest.DriveRaw(t, itest.Script{URL: mux.URL(), Steps: []itest.Op{itest.OpCall("scratch__read_note", readArgs)}})
		if len(other.Clients) != 1 || len(other.Clients[0].Steps) != 1 {
			t.Fatalf("scratch__read_note: driver failed: %s", stderr)
		}
		if s := other.Clients[0].Steps[0]; s.Error == nil {
			if r := s.Call(t); !r.IsError && strings.Contains(r.Text(), wantInRead[0]) {
				t.Errorf("scratch__read_note found the note written to notes: %q", r.Text())
			}
		}
	})

	t.Run("readonly profile", func(t *testing.T) {
		want := itest.Prefixed(upstreams, itest.DemoReadOnly)
		for _, tt := range []struct {
			name    string
			url     string
			headers map[string]string
		}{
			{"header", mux.URL(), map[string]string{"Mcp-Profile": "readonly"}},
			{"query", mux.URL() + "?profile=readonly", nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				steps := itest.Drive(t, itest.Script{URL: tt.url, Headers: tt.headers, Steps: []itest.Op{
					itest.OpList(),
					itest.OpCallExpectError("notes__write_note", map[string]any{}),
				}}).Steps(t)
				if got := slices.Sorted(slices.Values(steps[0].Names)); !slices.Equal(got, want) {
					t.Errorf("readonly tools/list = %v, want %v", got, want)
				}
				e := steps[1].Error
				if e == nil || e.Code == nil || *e.Code != -32601 || e.Message != "Tool not found: notes__write_note" {
					t.Errorf("calling a hidden tool: got %v, want -32601 \"Tool not found: notes__write_note\"", e)
				}
			})
		}
	})
}

// noteArgs builds write_note and read_note arguments from the tools' input
// schemas (the docs name the tools, not their arguments): every required
// string property gets a distinct value; read_note's properties take the
// values write_note got for the same names (the note's key). wantInRead are
// the written values read_note must give back: those of the properties
// read_note does not take (the note's body).
func noteArgs(t *testing.T, write, read *itest.Tool) (writeArgs, readArgs map[string]any, wantInRead []string) {
	t.Helper()
	type schema struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	var ws, rs schema
	if err := json.Unmarshal(write.InputSchema, &ws); err != nil {
		t.Fatalf("write_note inputSchema %s: %v", write.InputSchema, err)
	}
	if err := json.Unmarshal(read.InputSchema, &rs); err != nil {
		t.Fatalf("read_note inputSchema %s: %v", read.InputSchema, err)
	}
	suffix := itest.RandomHex(t, 4)
	writeArgs = map[string]any{}
	for _, p := range ws.Required {
		if ws.Properties[p].Type != "string" {
			t.Fatalf("write_note requires non-string %q; schema %s: teach noteArgs about it", p, write.InputSchema)
		}
		writeArgs[p] = "quickstart " + p + " ✓ " + suffix
	}
	readArgs = map[string]any{}
	for _, p := range rs.Required {
		v, ok := writeArgs[p]
		if !ok {
			t.Fatalf("read_note requires %q, which write_note does not take; schemas %s and %s", p, write.InputSchema, read.InputSchema)
		}
		readArgs[p] = v
	}
	for _, p := range ws.Required {
		if _, ok := readArgs[p]; !ok {
			wantInRead = append(wantInRead, writeArgs[p].(string))
		}
	}
	if len(readArgs) == 0 || len(wantInRead) == 0 {
		t.Fatalf("cannot tell a note's key from its body: write_note %s, read_note %s", write.InputSchema, read.InputSchema)
	}
	return writeArgs, readArgs, wantInRead
}
