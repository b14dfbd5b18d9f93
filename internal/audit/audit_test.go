package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestLog(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, true, nil)
	l.Write(Record{Time: time.Unix(0, 0).UTC(), Tool: "a\xffb", Decision: Denied, Reason: ReasonArguments}, json.RawMessage(`{"k":1}`))
	l.Write(Record{Tool: "x", Decision: Allowed}, json.RawMessage(`not json`))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(lines), buf.String())
	}
	var r Record
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil || string(r.Arguments) != `{"k":1}` || r.Decision != Denied {
		t.Fatalf("first line %s: %+v, %v", lines[0], r, err)
	}
	if strings.Contains(lines[1], "arguments") {
		t.Fatalf("invalid arguments were written: %s", lines[1])
	}
	var nilLog *Log
	nilLog.Write(Record{Tool: "x"}, nil) // a nil log writes nothing and does not panic
	var failed error
	New(failingWriter{}, false, func(err error) { failed = err }).Write(Record{Tool: "x"}, nil)
	if failed == nil {
		t.Fatal("a failed write was not reported")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestLogInvalidUTF8 checks that arguments holding invalid UTF-8 (which
// json.Valid accepts) still give a valid JSON line, with each bad byte
// escaped and everything else kept.
func TestLogInvalidUTF8(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, true, nil)
	args := json.RawMessage("{\"command\":\"ls \xff\xfe\",\"n\":12345678901234567890,\"ok\":\"h\u00e9\u00e9\"}")
	if !json.Valid(args) {
		t.Fatal("test input must be what json.Valid accepts")
	}
	l.Write(Record{Tool: "t\xff", Decision: Denied, Reason: ReasonArguments}, args)
	line := bytes.TrimSpace(buf.Bytes())
	if !utf8.Valid(line) || !json.Valid(line) {
		t.Fatalf("line is not valid UTF-8 JSON: %q", line)
	}
	var r struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatal(err)
	}
	want := "{\"command\":\"ls \\ufffd\\ufffd\",\"n\":12345678901234567890,\"ok\":\"h\u00e9\u00e9\"}"
	if string(r.Arguments) != want || r.Tool != "t\ufffd" {
		t.Fatalf("arguments %s, tool %q; want %s", r.Arguments, r.Tool, want)
	}
}
