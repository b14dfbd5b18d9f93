//go:build unix

package adversarial

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

func startRecording(t *testing.T) *itest.RecEnv {
	t.Helper()
	env := &itest.RecEnv{Rec: itest.StartRecorder(t, "rec", false), Mod: itest.StartRecorder(t, "mod", true), Stdio: map[string]*itest.SyncBuffer{}}
	env.Mux = itest.StartMux(t, itest.RecConfig(env.Rec, env.Mod))
	env.CfgPath = filepath.Join(env.Mux.Dir, "viewmux.toml")
	return env
}

// checkResultType checks a result's resultType: "complete" for a
// 2026-07-28 client, absent for a legacy one (viewmux removes the one a
// 2026-07-28 upstream sends).
func checkResultType(t testing.TB, d itest.RecDoor, a itest.RecAnswer) {
	t.Helper()
	var r map[string]json.RawMessage
	if err := json.Unmarshal(a.Msg.Result, &r); err != nil {
		t.Fatalf("result is not an object: %s", a)
	}
	rt, ok := r["resultType"]
	switch {
	case d.Modern && string(rt) != `"complete"`:
		t.Errorf("2026-07-28 result lacks resultType \"complete\": %s", a)
	case !d.Modern && ok:
		t.Errorf("a legacy client's result carries resultType %s: %s", rt, a)
	}
}

// TestRecordingForwardedBytes checks that what reaches the upstream is what
// viewmux checked: arguments, extra params members and _meta keep their
// meaning byte for byte (whitespace aside), only the name is the upstream's
// own, io.modelcontextprotocol/* keys the client sent are dropped (a
// 2026-07-28 upstream gets viewmux's own), and the result comes back
// unchanged in meaning.
func TestRecordingForwardedBytes(t *testing.T) {
	env := startRecording(t)
	// The client's protocol _meta: a legacy client's is not even valid on
	// its hop (it belongs to 2026-07-28), a modern client's is its own; in
	// neither case is it the upstream hop's.
	legacyMeta := `{"trace":"abc","com.example/nested":{"deep":[1,{"x":"\u00e9"}]},` +
		`"io.modelcontextprotocol/protocolVersion":"2025-06-18",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"evil-client","version":"0"},` +
		`"io.modelcontextprotocol/logLevel":"debug"}`
	modernMeta := `{"trace":"abc","com.example/nested":{"deep":[1,{"x":"\u00e9"}]},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"evil-client","version":"0"}}`
	const unusual = `{"text":"h\u00e9llo \ud83d\ude00 \u0000 \u2028 <&> \"q\" \\","big":12345678901234567890,` +
		`"huge":1.5e300,"tiny":1E-7,"neg":-0.0,"nested":{"a":{"b":{"c":[[],{},[null,false,true]]}}},` +
		`"empty":"","\u00fcml":"key spelled with an escape","spaced" :  [ 1 , 2 ] }`
	type fwdCase struct {
		name, method string
		params       func(up, meta string) string
		original     func(up string) (key, value string) // what the recorded params must name
	}
	tool := func(tl string) func(string) (string, string) {
		return func(string) (string, string) { return "name", tl }
	}
	cases := []fwdCase{
		{"run with an escaped command", "tools/call", func(up, meta string) string {
			return `{"name":"` + up + `__run","arguments":{"command":"git\u0020status"},"_meta":` + meta + `,"x-extra":{"k":[1,2,{"z":null}]}}`
		}, tool("run")},
		{"echo with unusual arguments", "tools/call", func(up, _ string) string {
			return `{ "name" : "` + up + `__echo" , "arguments" : ` + unusual + ` , "_meta" : {"trace":"abc"} }`
		}, tool("echo")},
		{"echo without _meta", "tools/call", func(up, _ string) string {
			return `{"name":"` + up + `__echo","arguments":{"n":12345678901234567890}}`
		}, tool("echo")},
		{"prompts/get", "prompts/get", func(up, meta string) string {
			return `{"name":"` + up + `__greet","arguments":{"who":"w\u00f6rld"},"_meta":` + meta + `}`
		}, tool("greet")},
		{"resources/read", "resources/read", func(up, meta string) string {
			return `{"uri":"rec://` + up + `/notes","_meta":` + meta + `}`
		}, func(up string) (string, string) { return "uri", "rec://" + up + "/notes" }},
	}
	for _, d := range env.Doors() {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			for _, up := range []string{"rec", "mod"} {
				for _, tc := range cases {
					t.Run(up+" "+tc.name, func(t *testing.T) {
						meta := legacyMeta
						if d.Modern {
							meta = modernMeta
						}
						params := tc.params(up, meta)
						m := env.Marks()
						a := c.Do(t, tc.method, params)
						if a.Msg.Error != nil || a.Msg.Result == nil {
							t.Fatalf("%s %s: want a result, got %s", tc.method, params, a)
						}
						rec, mod := env.Forwarded(m)
						got := rec
						if up == "mod" {
							got, mod = mod, rec
						}
						if len(got) != 1 || len(mod) != 0 {
							t.Fatalf("want exactly one request to %s and none to the other; got:\n%s", up, itest.RecDescribe(append(got, mod...)))
						}
						checkForwarded(t, d, env.Recorder(up), tc.method, params, got[0], tc.original)
						checkResultType(t, d, a)
						if tc.method == "tools/call" && !itest.RecSameJSON(recWithout(t, a.Msg.Result, "resultType"), recWithout(t, []byte(itest.RecToolResult), "resultType")) {
							t.Errorf("result changed on the way back:\n got %s\nwant %s (resultType and io.modelcontextprotocol/* _meta aside)", a.Msg.Result, itest.RecToolResult)
						}
					})
				}
			}
		})
	}
}

// checkForwarded compares the request up recorded with the params the
// client sent.
func checkForwarded(t *testing.T, d itest.RecDoor, up *itest.Recorder, method, sent string, r itest.RecRequest, original func(string) (string, string)) {
	t.Helper()
	if !strings.Contains(r.Query, "api_key="+itest.RecSecret) {
		t.Errorf("the upstream URL's query was not sent: %q", r.Query)
	}
	got := r.Params(t)
	key, want := original(up.Name)
	var name string
	if err := json.Unmarshal(got[key], &name); err != nil || name != want {
		t.Errorf("params.%s = %s, want %q", key, got[key], want)
	}
	if d.Modern {
		sent = itest.WithModernMeta(sent)
	}
	recorded, _ := json.Marshal(got)
	if a, b := recWithout(t, recorded, "name"), recWithout(t, []byte(sent), "name"); !itest.RecSameJSON(a, b) {
		t.Errorf("params changed on the way (name and io.modelcontextprotocol/* _meta aside):\n sent     %s\n received %s", b, a)
	}
	var args, sentArgs struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	json.Unmarshal(recorded, &args)
	json.Unmarshal([]byte(sent), &sentArgs)
	if len(sentArgs.Arguments) > 0 && !itest.RecSameJSON(args.Arguments, sentArgs.Arguments) {
		t.Errorf("arguments changed:\n sent     %s\n received %s", sentArgs.Arguments, args.Arguments)
	}
	reserved := recReservedMeta(t, got)
	if !up.Modern {
		if len(reserved) > 0 {
			t.Errorf("a 2025-11-25 upstream was sent io.modelcontextprotocol/* _meta keys: %v", reserved)
		}
		return
	}
	// A 2026-07-28 upstream gets this hop's own keys, never the client's.
	for k, v := range reserved {
		switch k {
		case mcp.MetaKeyProtocolVersion:
			if v != `"2026-07-28"` {
				t.Errorf("%s = %s, want \"2026-07-28\"", k, v)
			}
		case mcp.MetaKeyClientInfo:
			var info mcp.Implementation
			if json.Unmarshal([]byte(v), &info) != nil || info.Name != "viewmux" {
				t.Errorf("%s = %s, want viewmux's own", k, v)
			}
		case mcp.MetaKeyClientCapabilities, mcp.MetaKeyLogLevel:
		default:
			t.Errorf("the upstream was sent %s = %s, which viewmux does not set itself", k, v)
		}
	}
	if _, ok := reserved[mcp.MetaKeyProtocolVersion]; !ok {
		t.Errorf("a 2026-07-28 upstream was sent no %s", mcp.MetaKeyProtocolVersion)
	}
	if v := reserved[mcp.MetaKeyLogLevel]; !d.Modern && v == `"debug"` {
		t.Errorf("the client's own %s = %s reached the upstream", mcp.MetaKeyLogLevel, v)
	}
	h := r.Header
	if h.Get(mcp.HeaderProtocolVersion) != "2026-07-28" || h.Get(mcp.HeaderMethod) != method {
		t.Errorf("headers %s=%q %s=%q, want 2026-07-28 and %s", mcp.HeaderProtocolVersion, h.Get(mcp.HeaderProtocolVersion), mcp.HeaderMethod, h.Get(mcp.HeaderMethod), method)
	}
	if dec, _ := mcp.DecodeHeaderValue(h.Get(mcp.HeaderName)); dec != want {
		t.Errorf("header %s = %q, want the upstream's own %q", mcp.HeaderName, h.Get(mcp.HeaderName), want)
	}
}

// recRefusal is a request viewmux must refuse before anything is sent
// upstream. TOKEN in params is replaced by a value unique to the case.
type recRefusal struct {
	name, method, params string
	code                 int
	// message, when set, is the exact message (-32601 Tool not found, or
	// -32602 Arguments not allowed for rec__run); otherwise any message
	// will do.
	message string
}

// TestRecordingAmbiguousNeverForwarded checks that a tools/call (or
// prompts/get) whose params could be read two ways, or whose arguments
// break the call rule, is refused with -32602 and that no upstream was
// sent anything for it.
func TestRecordingAmbiguousNeverForwarded(t *testing.T) {
	env := startRecording(t)
	const rm = `"rm -rf /tmp/x-TOKEN"`
	notAllowed := "Arguments not allowed for rec__run"
	cases := []recRefusal{
		{name: "command and Command", params: `{"name":"rec__run","arguments":{"command":"git status","Command":` + rm + `}}`},
		{name: "command and COMMAND, refused value first", params: `{"name":"rec__run","arguments":{"COMMAND":` + rm + `,"command":"git status"}}`},
		{name: "command twice", params: `{"name":"rec__run","arguments":{"command":"git status","command":` + rm + `}}`},
		{name: "command twice, refused value first", params: `{"name":"rec__run","arguments":{"command":` + rm + `,"command":"git status"}}`},
		{name: "command twice, one spelled with escapes", params: `{"name":"rec__run","arguments":{"comm\u0061nd":` + rm + `,"command":"git status"}}`},
		{name: "command twice on the 2026-07-28 upstream", params: `{"name":"mod__run","arguments":{"command":` + rm + `,"command":"git status"}}`},
		{name: "Command on the 2026-07-28 upstream", params: `{"name":"mod__run","arguments":{"command":"git status","Command":` + rm + `}}`},
		{name: "name twice", params: `{"name":"rec__run","name":"rec__run","arguments":{"command":"git status","x":"TOKEN"}}`},
		{name: "name twice, hidden then visible", params: `{"name":"rec__secret_tool","name":"rec__run","arguments":{"command":"git status","x":"TOKEN"}}`},
		// The same key twice is -32602 "whether or not a rule
		// applies", also when the name decoded last is a hidden tool's.
		{name: "name twice, visible then hidden", params: `{"name":"rec__run","name":"rec__secret_tool","arguments":{"command":"git status","x":"TOKEN"}}`},
		{name: "name and Name", params: `{"name":"rec__run","Name":"rec__echo","arguments":{"command":"git status","x":"TOKEN"}}`},
		{name: "arguments twice", params: `{"name":"rec__run","arguments":{"command":` + rm + `},"arguments":{"command":"git status"}}`},
		{name: "arguments and Arguments", params: `{"name":"rec__run","arguments":{"command":"git status"},"Arguments":{"command":` + rm + `}}`},
		{name: "arguments and argumentſ (long s)", params: `{"name":"rec__run","arguments":{"command":"git status"},"argument\u017f":{"command":` + rm + `}}`},
		{name: "kind and \u212aind (Kelvin sign), no call rule", params: `{"name":"rec__echo","arguments":{"kind":"a","\u212aind":"TOKEN"}}`},
		{name: "key twice in a nested object, no call rule", params: `{"name":"rec__echo","arguments":{"opts":{"a":"TOKEN","a":2}}}`},
		{name: "key twice in an array element, no call rule", params: `{"name":"rec__echo","arguments":{"list":[1,{"a":"TOKEN","a":2}]}}`},
		{name: "key twice in _meta", params: `{"name":"rec__run","arguments":{"command":"git status"},"_meta":{"trace":"TOKEN","trace":"b"}}`},
		{name: "prompts/get, argument twice", method: "prompts/get", params: `{"name":"rec__greet","arguments":{"who":"a","who":"TOKEN"}}`},
		{name: "call rule: other command", params: `{"name":"rec__run","arguments":{"command":` + rm + `}}`, message: notAllowed},
		{name: "call rule: shell metacharacter", params: `{"name":"rec__run","arguments":{"command":"git status; rm -rf /tmp/x-TOKEN"}}`, message: notAllowed},
		{name: "call rule: newline", params: `{"name":"rec__run","arguments":{"command":"git status\nrm -rf /tmp/x-TOKEN"}}`, message: notAllowed},
		{name: "call rule: command not a string", params: `{"name":"rec__run","arguments":{"command":["git status","TOKEN"]}}`, message: notAllowed},
		{name: "call rule: command missing", params: `{"name":"rec__run","arguments":{"cmd":"TOKEN"}}`, message: notAllowed},
		// other_args = false is the default, so an argument the
		// rule does not name is refused.
		{name: "call rule: an argument the rule does not name", params: `{"name":"rec__run","arguments":{"command":"git status","extra":"TOKEN"}}`, message: notAllowed},
	}
	for i := range cases {
		if cases[i].method == "" {
			cases[i].method = "tools/call"
		}
		if cases[i].code == 0 {
			cases[i].code = mcp.INVALID_PARAMS
		}
	}
	runRefusals(t, env, cases)
}

// runRefusals runs cases on every door.
func runRefusals(t *testing.T, env *itest.RecEnv, cases []recRefusal) {
	for _, d := range env.Doors() {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					token := fmt.Sprintf("tok%d%s", i, itest.RandomHex(t, 6))
					params := strings.ReplaceAll(tc.params, "TOKEN", token)
					m := env.Marks()
					a := c.Do(t, tc.method, params)
					e := a.Msg.Error
					switch {
					case e == nil:
						t.Errorf("%s %s: want error %d, got %s", tc.method, params, tc.code, a)
					case tc.code == mcp.METHOD_NOT_FOUND:
						itest.WantToolNotFound(t, a.DriveError(), strings.TrimPrefix(tc.message, "Tool not found: "))
					case tc.message != "":
						itest.WantArgsNotAllowed(t, a.DriveError(), "rec__run", params)
					case e.Code != tc.code:
						t.Errorf("%s: got %s, want error code %d", params, a, tc.code)
					}
					if d.Modern && e != nil {
						if want := map[int]int{mcp.INVALID_PARAMS: 400, mcp.METHOD_NOT_FOUND: 404}[e.Code]; want != 0 && a.Status != want {
							t.Errorf("2026-07-28 error %d came with HTTP %d, want %d", e.Code, a.Status, want)
						}
					}
					env.CheckNothingForwarded(t, c, m, token)
				})
			}
		})
	}
}

// TestRecordingHiddenNeverForwarded checks that a hidden tool, an unknown
// one, and names that differ from a visible tool only in case, spacing or
// invisible characters all get the same -32601 "Tool not found: <name>",
// and that no upstream was sent anything for them.
func TestRecordingHiddenNeverForwarded(t *testing.T) {
	env := startRecording(t)
	names := []string{
		"rec__secret_tool", "mod__secret_tool", "rec__no_such_tool", "rec__Secret_tool",
		"REC__RUN", "rec__Run", "rec__run ", " rec__run", "rec__run\t", "rec__run\n",
		"rec__run\u200b", "rec__secret_tool\u0000", "rec__run\u202e", "rec__ru\u0578",
		"run", "secret_tool", "rec_run", "rec__", "rec__" + strings.Repeat("x", 200),
	}
	var cases []recRefusal
	for _, n := range names {
		q, _ := json.Marshal(n)
		cases = append(cases, recRefusal{
			name:    strconv.QuoteToASCII(n),
			method:  "tools/call",
			params:  `{"name":` + string(q) + `,"arguments":{"command":"git status","x":"TOKEN"}}`,
			code:    mcp.METHOD_NOT_FOUND,
			message: "Tool not found: " + itest.RecPrintable(n),
		})
	}
	runRefusals(t, env, cases)
}

// TestRecordingErrorPassThrough checks that an upstream's JSON-RPC errors
// reach the client as they were sent: code, message and data, with nothing
// added, from a 2025-11-25 and a 2026-07-28 upstream, for
// tools/call, prompts/get and resources/read.
func TestRecordingErrorPassThrough(t *testing.T) {
	env := startRecording(t)
	type errCase struct{ name, method, params, want string }
	var cases []errCase
	for _, up := range []string{"rec", "mod"} {
		var keys []string
		for k := range itest.RecErrors {
			if k != "prompt" && k != "resource" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			cases = append(cases, errCase{up + " " + k, "tools/call", `{"name":"` + up + `__fail","arguments":{"case":"` + k + `"}}`, k})
		}
		cases = append(cases,
			errCase{up + " prompts/get", "prompts/get", `{"name":"` + up + `__broken"}`, "prompt"},
			errCase{up + " resources/read", "resources/read", `{"uri":"rec://` + up + `/broken"}`, "resource"})
	}
	for _, d := range env.Doors() {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					want := itest.RecErrors[tc.want]
					a := c.Do(t, tc.method, tc.params)
					var got struct {
						Error  json.RawMessage `json:"error"`
						Result json.RawMessage `json:"result"`
					}
					if err := json.Unmarshal(a.Raw, &got); err != nil || got.Error == nil {
						t.Fatalf("want the upstream's error %s, got %s", want.Body, a)
					}
					if !itest.RecSameJSON(got.Error, []byte(want.Body)) {
						t.Errorf("the upstream's error changed on the way:\n got  %s\n want %s", got.Error, want.Body)
					}
					if d.Modern && a.Msg.Error.Code == mcp.MISSING_REQUIRED_CLIENT_CAPABILITY && a.Status != 400 {
						t.Errorf("-32021 on 2026-07-28 HTTP came with HTTP %d, want 400", a.Status)
					}
				})
			}
		})
	}
}

// recLeaks returns what of the transport's internals text gives away.
func recLeaks(text string, ups ...*itest.Recorder) []string {
	bad := []string{"127.0.0.1", "localhost", "[::1]", "http://", "https://", "api_key", itest.RecSecret, "/mcp?", "dial tcp", "connection refused"}
	for _, u := range ups {
		_, port, _ := net.SplitHostPort(u.Addr)
		bad = append(bad, u.Addr, ":"+port)
	}
	var found []string
	for _, b := range bad {
		if strings.Contains(text, b) {
			found = append(found, b)
		}
	}
	return found
}

// TestRecordingOwnErrorsLeakNothing checks viewmux's own errors — an
// upstream that does not answer within call_timeout, one that is gone —
// on every door: -32603, naming the upstream, and carrying no URL,
// address, port, query or secret. The upstream's secret
// must not be in viewmux's logs either.
func TestRecordingOwnErrorsLeakNothing(t *testing.T) {
	t.Parallel()
	env := startRecording(t)
	doors := env.Doors()
	clients := make([]itest.RecClient, len(doors))
	for i, d := range doors {
		clients[i] = d.Open(t)
	}
	ownError := func(t *testing.T, c itest.RecClient, up, tool string) itest.RecAnswer {
		t.Helper()
		a := c.Do(t, "tools/call", `{"name":"`+up+`__`+tool+`","arguments":{"command":"git status"}}`)
		e := a.Msg.Error
		if e == nil {
			t.Fatalf("want viewmux's own error, got %s", a)
		}
		if e.Code != mcp.INTERNAL_ERROR {
			t.Errorf("error code %d, want -32603 (an upstream that is down or restarting is a temporary error, never -32601): %s", e.Code, a)
		}
		if !itest.MentionsName(e.Message, up) {
			t.Errorf("the error does not name upstream %q: %s", up, a)
		}
		if leaks := recLeaks(string(a.Raw), env.Rec, env.Mod); len(leaks) > 0 {
			t.Errorf("the client's error gives away %q: %s", leaks, a)
		}
		return a
	}
	eachDoor := func(t *testing.T, f func(t *testing.T, c itest.RecClient)) {
		for i, d := range doors {
			t.Run(d.Name, func(t *testing.T) { f(t, clients[i]) })
		}
	}

	t.Run("call_timeout", func(t *testing.T) {
		eachDoor(t, func(t *testing.T, c itest.RecClient) {
			for _, up := range []string{"rec", "mod"} {
				a := ownError(t, c, up, "hang")
				if !strings.Contains(a.Msg.Error.Message, "call_timeout") {
					t.Errorf("a timed-out call does not say so: %s", a)
				}
			}
		})
	})
	env.Rec.Close()
	env.Mod.Close()
	t.Run("upstream gone", func(t *testing.T) {
		eachDoor(t, func(t *testing.T, c itest.RecClient) {
			for _, up := range []string{"rec", "mod"} {
				ownError(t, c, up, "run")
			}
		})
	})
	t.Run("upstream still gone a while later", func(t *testing.T) {
		time.Sleep(1500 * time.Millisecond) // past the first reconnect attempt (backoff starts at 1s)
		eachDoor(t, func(t *testing.T, c itest.RecClient) {
			for _, up := range []string{"rec", "mod"} {
				ownError(t, c, up, "run")
			}
		})
	})
	t.Run("logs carry no secret", func(t *testing.T) {
		logs := map[string]string{"viewmux serve": env.Mux.Stderr()}
		for name, b := range env.Stdio {
			logs["viewmux serve --stdio ("+name+")"] = b.String()
		}
		for what, text := range logs {
			for _, line := range strings.Split(text, "\n") {
				if strings.Contains(line, itest.RecSecret) {
					t.Errorf("%s logged the upstream URL's query secret: %s", what, line)
				}
			}
		}
	})
}

// TestRecordingModernStateless checks a 2026-07-28 client on /mcp in
// detail: no initialize and no session, the protocol in _meta and the
// standard headers; results carry resultType and viewmux's serverInfo,
// upstream errors pass through unchanged with their HTTP status, and the
// 2025-11-25 upstream is sent none of the client's protocol _meta.
func TestRecordingModernStateless(t *testing.T) {
	env := startRecording(t)
	var modern itest.RecDoor
	for _, d := range env.Doors() {
		if d.Modern {
			modern = d
		}
	}
	c := modern.Open(t)
	for _, up := range []string{"rec", "mod"} {
		t.Run(up+" run", func(t *testing.T) {
			m := env.Marks()
			a := c.Do(t, "tools/call", `{"name":"`+up+`__run","arguments":{"command":"git status"},"_meta":{"trace":"modern"}}`)
			if a.Status != 200 || a.Msg.Error != nil {
				t.Fatalf("want HTTP 200 and a result, got %s", a)
			}
			checkResultType(t, modern, a)
			var res struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			}
			json.Unmarshal(a.Msg.Result, &res)
			var info mcp.Implementation
			if json.Unmarshal(res.Meta[mcp.MetaKeyServerInfo], &info) != nil || info.Name == "" || strings.HasPrefix(info.Name, "recorder-") {
				t.Errorf("result _meta %s = %s, want viewmux's own serverInfo", mcp.MetaKeyServerInfo, res.Meta[mcp.MetaKeyServerInfo])
			}
			rec, mod := env.Forwarded(m)
			got := append(rec, mod...)
			if len(got) != 1 {
				t.Fatalf("want one forwarded request, got:\n%s", itest.RecDescribe(got))
			}
			p := got[0].Params(t)
			var meta map[string]json.RawMessage
			json.Unmarshal(p["_meta"], &meta)
			if string(meta["trace"]) != `"modern"` {
				t.Errorf("the client's _meta did not arrive: %s", p["_meta"])
			}
			if reserved := recReservedMeta(t, p); up == "rec" && len(reserved) > 0 {
				t.Errorf("the 2025-11-25 upstream was sent the client's protocol _meta: %v", reserved)
			}
		})
		t.Run(up+" fail", func(t *testing.T) {
			want := itest.RecErrors["missing capability"]
			a := c.Do(t, "tools/call", `{"name":"`+up+`__fail","arguments":{"case":"missing capability"}}`)
			var got struct {
				Error json.RawMessage `json:"error"`
			}
			json.Unmarshal(a.Raw, &got)
			if a.Status != 400 || !itest.RecSameJSON(got.Error, []byte(want.Body)) {
				t.Errorf("got %s, want HTTP 400 with the upstream's error %s", a, want.Body)
			}
		})
	}
}
