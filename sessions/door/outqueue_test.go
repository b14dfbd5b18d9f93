package door

import (
	"fmt"
	"sync"
	"testing"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// TestOutQueue: a Conn's out queue keeps order, holds at most
// outBuffer frames, and gives its room back once drained, so an idle
// session holds none; producers that found it full go on as the writer
// takes frames, and none is lost.
func TestOutQueue(t *testing.T) {
	q := newOutQueue()
	for i := range outBuffer {
		if !q.tryPut(jsonrpc.Whole([]byte(fmt.Sprint(i))), nil) {
			t.Fatalf("frame %d refused below the bound", i)
		}
	}
	if q.tryPut(jsonrpc.Whole([]byte("x")), nil) {
		t.Fatalf("a frame past outBuffer (%d) was queued", outBuffer)
	}
	for i := range outBuffer {
		f, ok := q.take()
		if !ok || string(f.frame.Bytes()) != fmt.Sprint(i) {
			t.Fatalf("take %d = %q, %v", i, f.frame.Bytes(), ok)
		}
	}
	if _, ok := q.take(); ok {
		t.Fatal("an empty queue gave a frame")
	}
	if q.frames != nil {
		t.Errorf("a drained queue still holds room for %d frames", cap(q.frames))
	}

	// Producers that wait for room, one writer.
	const producers, each = 8, 500
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				f := jsonrpc.Whole([]byte(fmt.Sprintf("%d %d", p, i)))
				for !q.tryPut(f, nil) {
					<-q.room
				}
			}
		})
	}
	next := make([]int, producers)
	for got := 0; got < producers*each; {
		f, ok := q.take()
		if !ok {
			<-q.ready
			continue
		}
		var p, i int
		fmt.Sscanf(string(f.frame.Bytes()), "%d %d", &p, &i)
		if i != next[p] {
			t.Fatalf("producer %d: frame %d came when %d was due", p, i, next[p])
		}
		next[p]++
		got++
	}
	wg.Wait()
}
