package sessions

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
)

// BenchmarkStdioDoorCall measures one small tools/call through the stdio
// door, in-process over pipes, request line to answer line, from an HTTP
// upstream that answers from prebuilt bytes: the door's own cost per call
// (its reader, worker and writer), for the stdio bar (-cpuprofile).
func BenchmarkStdioDoorCall(b *testing.B) {
	up := rawUpstream(b, 2, false)
	s := newBenchServer(b, up.URL, "")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.ServeStdio(ctx, "", inR, outW)
		outW.Close()
		close(done)
	}()
	b.Cleanup(func() { inW.Close(); cancel(); <-done })
	br := bufio.NewReader(outR)
	roundTrip := func(line string) string {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			b.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		return got
	}
	roundTrip(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`)
	io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		got := roundTrip(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"up__big","arguments":{}}}`, i+2))
		if !strings.Contains(got, `"result"`) {
			b.Fatalf("call %d: %s", i, got)
		}
	}
}
