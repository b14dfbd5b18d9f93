//go:build unix

package itest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Script is what client/drive.mjs runs; see the comment at its top.
type Script struct {
	URL       string            `json:"url"`
	Headers   map[string]string `json:"headers,omitempty"`
	Clients   int               `json:"clients,omitempty"`   // 0 = 1
	TimeoutMs int               `json:"timeoutMs,omitempty"` // per request; 0 = 30000
	Terminate bool              `json:"terminate,omitempty"`
	Steps     []Op              `json:"steps"`
	// Sessions, instead of Clients and Steps, runs one client per entry,
	// concurrently, each with its own URL, headers and steps (see
	// SessionScript in sessions_driver_test.go).
	Sessions []SessionScript `json:"sessions,omitempty"`
}

// Op is one step of a Script. Strings may contain "{{client}}", replaced by
// the client's index.
type Op struct {
	Op          string `json:"op"`
	Name        string `json:"name,omitempty"`
	Args        any    `json:"args,omitempty"`
	Meta        any    `json:"meta,omitempty"`
	URI         string `json:"uri,omitempty"`
	Method      string `json:"method,omitempty"`
	Params      any    `json:"params,omitempty"`
	Ms          int    `json:"ms,omitempty"`
	TimeoutMs   int    `json:"timeoutMs,omitempty"`
	ExpectError bool   `json:"expectError,omitempty"`
	Progress    bool   `json:"progress,omitempty"`
	Raw         bool   `json:"raw,omitempty"`
}

func OpList() Op                      { return Op{Op: "list"} }
func OpCall(name string, args any) Op { return Op{Op: "call", Name: name, Args: args} }
func OpCallExpectError(name string, args any) Op {
	return Op{Op: "callExpectError", Name: name, Args: args}
}

// Result is drive.mjs's output.
type Result struct {
	OK      bool           `json:"ok"`
	Clients []ClientResult `json:"clients"`
}

// ClientResult is what one client session saw.
type ClientResult struct {
	Index              int             `json:"index"`
	SessionID          string          `json:"sessionId"`
	ProtocolVersion    string          `json:"protocolVersion"`
	ServerInfo         json.RawMessage `json:"serverInfo"`
	ServerCapabilities json.RawMessage `json:"serverCapabilities"`
	Instructions       string          `json:"instructions"`
	Steps              []StepResult    `json:"steps"`
	Notifications      []Notification  `json:"notifications"`
	Error              *DriveError     `json:"error"`
}

// StepResult is the outcome of one Op.
type StepResult struct {
	Op     string `json:"op"`
	Name   string `json:"name"`
	URI    string `json:"uri"`
	Method string `json:"method"`
	OK     bool   `json:"ok"`

	Names             []string          `json:"names"` // list, listPrompts
	Tools             []Tool            `json:"tools"`
	Prompts           json.RawMessage   `json:"prompts"`
	Resources         json.RawMessage   `json:"resources"`
	URIs              []string          `json:"uris"`
	ResourceTemplates json.RawMessage   `json:"resourceTemplates"`
	Pages             int               `json:"pages"`
	Result            json.RawMessage   `json:"result"`
	Progress          []json.RawMessage `json:"progress"`
	Notification      *Notification     `json:"notification"`
	Error             *DriveError       `json:"error"`
}

// DriveError is an error as drive.mjs reports it. For Kind "jsonrpc", Code
// and Message are exactly what the server sent.
type DriveError struct {
	Stage   string          `json:"stage"` // only on ClientResult.Error
	Kind    string          `json:"kind"`  // jsonrpc, http, other, unexpected
	Code    *int            `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

func (e *DriveError) String() string {
	if e == nil {
		return "<nil>"
	}
	code := "none"
	if e.Code != nil {
		code = fmt.Sprint(*e.Code)
	}
	return fmt.Sprintf("%s error (code %s): %q", e.Kind, code, e.Message)
}

// Notification is a server notification a client received.
type Notification struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// Tool is one entry of tools/list.
type Tool struct {
	Name         string                     `json:"name"`
	Title        string                     `json:"title"`
	Description  string                     `json:"description"`
	InputSchema  json.RawMessage            `json:"inputSchema"`
	OutputSchema json.RawMessage            `json:"outputSchema"`
	Annotations  *Annotations               `json:"annotations"`
	Meta         map[string]json.RawMessage `json:"_meta"`
}

// Annotations are a tool's hints; nil means absent.
type Annotations struct {
	Title           string `json:"title"`
	ReadOnlyHint    *bool  `json:"readOnlyHint"`
	DestructiveHint *bool  `json:"destructiveHint"`
	IdempotentHint  *bool  `json:"idempotentHint"`
	OpenWorldHint   *bool  `json:"openWorldHint"`
}

// CallResult is a tools/call result.
type CallResult struct {
	Content           []Content       `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

// Content is one content block.
type Content struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Data     string `json:"data"`
	MimeType string `json:"mimeType"`
}

// Tool returns the listed tool called name, or nil.
func (s StepResult) Tool(name string) *Tool {
	for i := range s.Tools {
		if s.Tools[i].Name == name {
			return &s.Tools[i]
		}
	}
	return nil
}

// Call decodes the step's tools/call result, failing the test if the step
// has none.
func (s StepResult) Call(t testing.TB) CallResult {
	t.Helper()
	if len(s.Result) == 0 {
		t.Fatalf("step %s %s has no result (error: %v)", s.Op, s.Name, s.Error)
	}
	var r CallResult
	if err := json.Unmarshal(s.Result, &r); err != nil {
		t.Fatalf("step %s %s: decode result %s: %v", s.Op, s.Name, s.Result, err)
	}
	return r
}

// Text returns the concatenated text of a call result's text blocks.
func (r CallResult) Text() string {
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// Steps returns the steps of the only client, failing the test when the
// script ran more than one.
func (r Result) Steps(t testing.TB) []StepResult {
	t.Helper()
	if len(r.Clients) != 1 {
		t.Fatalf("Result.Steps on %d clients", len(r.Clients))
	}
	return r.Clients[0].Steps
}

// IsTrue reports whether a hint is present and true.
func IsTrue(b *bool) bool { return b != nil && *b }

// Drive runs script with client/drive.mjs and returns its result. Any
// unexpected failure — a step error not marked expectError, an expected
// error that did not come, a connection failure — fails the test with the
// driver's stderr and output.
func Drive(t testing.TB, script Script) Result {
	t.Helper()
	res, stderr, err := DriveRaw(t, script)
	if err != nil {
		steps, _ := json.MarshalIndent(script.Steps, "", "  ")
		out, _ := json.MarshalIndent(res, "", "  ")
		t.Fatalf("drive.mjs against %s: %v\n--- driver stderr ---\n%s--- script steps ---\n%s\n--- driver result ---\n%s",
			script.URL, err, stderr, steps, out)
	}
	return res
}

// DriveRaw runs script and returns the decoded result, the driver's stderr,
// and a non-nil error when the driver exited non-zero or printed no result.
func DriveRaw(t testing.TB, script Script) (Result, string, error) {
	t.Helper()
	RequireNode(t)
	in, err := json.Marshal(script)
	if err != nil {
		t.Fatalf("encode script: %v", err)
	}
	stdout, stderr, runErr := RunNodeScript(t, "drive.mjs", in)
	var res Result
	if len(stdout) > 0 {
		if err := json.Unmarshal(stdout, &res); err != nil {
			return res, string(stderr), fmt.Errorf("decode driver output %q: %w (exit: %v)", stdout, err, runErr)
		}
	} else if runErr == nil {
		return res, string(stderr), errors.New("driver printed nothing")
	}
	if runErr != nil {
		return res, string(stderr), fmt.Errorf("driver: %w", runErr)
	}
	return res, string(stderr), nil
}

// WaitForTools lists tools through url until every name in want is listed
// or timeout passes, and returns the last list. Use it where readiness does
// not cover the upstreams (those not marked required).
func WaitForTools(t testing.TB, url string, headers map[string]string, want []string, timeout time.Duration) StepResult {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		list := Drive(t, Script{URL: url, Headers: headers, Steps: []Op{OpList()}}).Steps(t)[0]
		missing := slices.DeleteFunc(slices.Clone(want), func(n string) bool { return slices.Contains(list.Names, n) })
		if len(missing) == 0 {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, tools/list still lacks %v; it has %v", timeout, missing, list.Names)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
