package upstream

import (
	"context"
	"math/bits"
	"sync"
	"testing"
	"time"
)

// A Loan takes back, for reuse, the buffers that the answers to a
// caller's requests were read into, once the caller has written those
// answers out. A result of a megabyte then costs no new allocation per
// call, and so no garbage collection: at that size, collecting the
// buffers cost about as much CPU as everything else viewmux does with the
// result. A caller without a Loan gets buffers of its own.
//
// Only the results of tools/call and resources/read are read under a
// loan (lendable), and only from a JSON body (readJSON): their bytes go
// back to the client and nowhere else. A result that is not the answer to
// its request (it is handed to the engine) is never lent.
//
// A caller that takes no frame of a call after its answer (no progress
// token, no log level) may also let the call return before the end of the
// event stream its answer came on (AnswerFirst): the caller writes the
// answer at once and waits for that end afterwards (Settle), so that the
// upstream connection is back in its pool before the caller's next
// request, without the client waiting for it.
//
// A loan may also take a large result unread (AllowTail): the request's
// door then writes it to its client as it is read (Tail).
type Loan struct {
	mu       sync.Mutex
	bufs     []*[]byte
	released bool
	// answerFirst is set by AnswerFirst; ends are the streams that calls
	// under the loan returned before the end of.
	answerFirst bool
	ends        []<-chan struct{}
	tailAbove   int64 // 0: every result is read whole
	tail        *Tail
}

// AllowTail lets a result of a request made with Request.Tail that is
// larger than above bytes be handed over unread (a Tail, TakeTail) rather
// than read whole; 0 turns that off. The loan's owner calls it before
// the request. Safe on a nil Loan (which allows nothing).
func (l *Loan) AllowTail(above int64) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.tailAbove = above
	l.mu.Unlock()
}

// tailLimit is what AllowTail set (0: none).
func (l *Loan) tailLimit() int64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tailAbove
}

// setTail hands t to the loan's owner; false when the loan was released
// already (t is then the caller's to close).
func (l *Loan) setTail(t *Tail) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || l.tail != nil {
		return false
	}
	l.tail = t
	return true
}

// hasTail reports whether the loan holds a Tail not taken yet.
func (l *Loan) hasTail() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tail != nil
}

// TakeTail returns the result a request under the loan handed over unread
// (Send then returned no result and no error), or nil; the caller owns it
// and must close it. Safe on a nil Loan.
func (l *Loan) TakeTail() *Tail {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tail
	l.tail = nil
	return t
}

// AnswerFirst lets calls under l return their answer before the end of
// its event stream: the caller calls Settle once it has written it.
// Frames that come on that stream after the answer then reach the
// caller only after it has written the answer (late, for a door that can
// still deliver them), so a caller that would deliver them before its
// answer must not use it.
func (l *Loan) AnswerFirst() { l.answerFirst = true }

// deferEnd records that a call under l returned before end closed; false
// when l does not allow it (the call waits for end itself).
func (l *Loan) deferEnd(end <-chan struct{}) bool {
	if l == nil || !l.answerFirst {
		return false
	}
	l.mu.Lock()
	l.ends = append(l.ends, end)
	l.mu.Unlock()
	return true
}

// Pending reports whether Settle has streams to wait for. Safe on nil.
func (l *Loan) Pending() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ends) > 0
}

// Settle waits for the ends of the streams that calls under l returned
// before, at most streamEndGrace in all. Safe on nil.
func (l *Loan) Settle() {
	if l == nil {
		return
	}
	l.mu.Lock()
	ends := l.ends
	l.ends = nil
	l.mu.Unlock()
	if len(ends) == 0 {
		return
	}
	t := time.NewTimer(streamEndGrace)
	defer t.Stop()
	for _, end := range ends {
		select {
		case <-end:
		case <-t.C:
			return
		}
	}
}

type loanKey struct{}

// WithLoan returns ctx whose requests' results are read into buffers l
// takes back; l nil removes any loan ctx carries (for work that outlives
// the loan's caller).
func WithLoan(ctx context.Context, l *Loan) context.Context {
	return context.WithValue(ctx, loanKey{}, l)
}

// LoanFrom returns the loan ctx carries, or nil.
func LoanFrom(ctx context.Context) *Loan {
	l, _ := ctx.Value(loanKey{}).(*Loan)
	return l
}

// Buffer returns an empty slice with room for n bytes, for a result
// rewritten on its way to the caller: from the pool and lent to l when n
// is large enough to be pooled, else (or for a nil or released loan) a new
// one. What the caller builds in it is under the loan like a result read
// under it.
func (l *Loan) Buffer(n int) []byte {
	if l != nil {
		if b := getBuffer(n); b != nil && l.lend(b) {
			return (*b)[:0:n] // what an earlier result left past n stays out of reach
		}
	}
	return make([]byte, 0, n)
}

// lendable reports whether the result of method may be read under a loan.
func lendable(method string) bool {
	return method == "tools/call" || method == "resources/read"
}

// lend records b as lent; false when the loan was released already (b is
// then left to the garbage collector).
func (l *Loan) lend(b *[]byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return false
	}
	l.bufs = append(l.bufs, b)
	return true
}

// Size returns the bytes of the buffers lent under l and not given back:
// what holding the results read under it costs. Safe on a nil Loan.
func (l *Loan) Size() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, b := range l.bufs {
		n += cap(*b)
	}
	return n
}

// Release gives back every buffer lent. The caller must hold no result
// read under the loan any more, nor any part of one: the buffers are
// reused for other callers' results. A loan lends nothing after Release.
// Safe on a nil Loan.
func (l *Loan) Release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	bufs, tail := l.bufs, l.tail
	l.bufs, l.released, l.tail = nil, true, nil
	l.mu.Unlock()
	if tail != nil {
		tail.Close() // never taken
	}
	for _, b := range bufs {
		putBuffer(b)
	}
}

// Pooled buffers come in four sizes per power of two, so that one is at
// most a quarter larger than what it holds. Smaller answers are not
// pooled: they cost little to collect.
const (
	minPooled = 64 << 10
	maxPooled = 1 << 40
)

var bufPools [4 * 64]sync.Pool // by bufClass

// poisonReleased makes Release overwrite what it takes back, in tests: a
// result still used after its loan was released then shows as '#'s
// instead of passing unnoticed.
var poisonReleased = testing.Testing()

// bufClass is the pool and the size of a buffer for n bytes, n >
// minPooled.
func bufClass(n int) (class, size int) {
	k := bits.Len(uint(n-1)) - 1 // 2^k < n ≤ 2^(k+1)
	step := 1 << (k - 2)
	q := (n - 1<<k + step - 1) / step // 1…4
	return 4*k + q - 1, 1<<k + q*step
}

// getBuffer returns a buffer of at least n bytes from the pool (nil when n
// is not pooled).
func getBuffer(n int) *[]byte {
	if n <= minPooled || n > maxPooled {
		return nil
	}
	class, size := bufClass(n)
	if b, ok := bufPools[class].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, size)
	return &b
}

func putBuffer(b *[]byte) {
	n := len(*b)
	if n <= minPooled || n > maxPooled {
		return
	}
	class, size := bufClass(n)
	if size != n {
		return
	}
	if poisonReleased {
		for i := range *b {
			(*b)[i] = '#'
		}
	}
	bufPools[class].Put(b)
}
