package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
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
