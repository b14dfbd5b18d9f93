package wire

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadEvent(t *testing.T) {
	big := `{"jsonrpc":"2.0","id":"viewmux-7","result":{"x":"` + strings.Repeat("a", 100) + `"}}`
	stream := ": comment\r\n" +
		"id: 1\nretry: 10\n\n" + // priming event without data
		"event: message\ndata: {\"a\":\ndata: 1}\n\n" +
		"event: other\ndata: {\"skip\":true}\n\n" +
		"data:" + big + "\r\n\r\n" +
		"data: {\"b\":2}\n\n" +
		"data: {\"cut\""
	r := bufio.NewReaderSize(strings.NewReader(stream), 16)
	f, err := ReadEvent(r, 64)
	if err != nil || string(f.Data) != "{\"a\":\n1}" {
		t.Fatalf("first event = %q, %v", f.Data, err)
	}
	f, err = ReadEvent(r, 64)
	if err != nil || !f.Oversize || string(f.ID) != `"viewmux-7"` || f.Method {
		t.Fatalf("oversize event = %+v, %v", f, err)
	}
	f, err = ReadEvent(r, 64)
	if err != nil || string(f.Data) != `{"b":2}` {
		t.Fatalf("third event = %q, %v", f.Data, err)
	}
	if _, err = ReadEvent(r, 64); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut event: err = %v, want unexpected EOF", err)
	}
	if _, err = ReadEvent(bufio.NewReader(strings.NewReader("")), 64); !errors.Is(err, io.EOF) {
		t.Fatalf("empty stream: err = %v, want EOF", err)
	}
}
