package sessions

import (
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// reclaimDelay is how long a reclaimer waits after a caller let go of the
// unread answers that filled its share before it collects them: the
// answers of one burst stall, and so are let go, together, and the
// goroutines that held them return meanwhile.
const reclaimDelay = 500 * time.Millisecond

// reclaimer gives the memory of unread answers back to the system once
// the caller that held them has let them go (the write deadline passed):
// a caller that fills its share (server.max_pending_bytes_per_caller)
// leaves that much garbage behind, which the collector, paced by what is
// live, may otherwise keep for minutes. At most one collection is
// scheduled at a time, so a caller that fills its share again and again
// costs one forced collection per reclaimDelay at most; callers that read
// their answers cost nothing. It is safe for concurrent use; stop ends
// it.
type reclaimer struct {
	mu      sync.Mutex
	timer   *time.Timer // scheduled; nil = none
	again   bool        // kicked while scheduled: another follows this one
	stopped bool
}

// kick schedules a collection, or, when one is scheduled already, one more
// after it: what was let go after the scheduled one began would otherwise
// wait for the runtime's own, minutes away in an idle process.
func (r *reclaimer) kick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if r.timer != nil {
		r.again = true
		return
	}
	r.schedule()
}

// schedule starts the timer of the next collection. The caller holds r.mu.
func (r *reclaimer) schedule() {
	r.timer = time.AfterFunc(reclaimDelay, func() {
		// Twice: buffers given back to a pool (upstream.Loan) outlive
		// one collection.
		runtime.GC()
		debug.FreeOSMemory()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.timer = nil
		if r.again && !r.stopped {
			r.again = false
			r.schedule()
		}
	})
}

// stop cancels a scheduled collection and schedules no more. It does not
// wait for one that has begun.
func (r *reclaimer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}
