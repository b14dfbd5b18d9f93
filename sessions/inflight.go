package sessions

import (
	"context"
	"encoding/json"
	"sync"
)

// inflight are one session's client requests in progress, by the id the
// client gave them, so that a notifications/cancelled naming one cancels
// it: on /mcp and on the stream doors alike, one kind of map with one
// lock of its own. The zero value is ready to use; it is safe for
// concurrent use.
type inflight struct {
	mu sync.Mutex
	m  map[string]*tracked
}

// tracked is one request's entry; its address tells a request from a later
// one that reused its id.
type tracked struct {
	key    string
	cancel context.CancelCauseFunc
}

// track derives from ctx the context of the request id and records it as
// cancellable. forget (which also cancels the context) must be called when
// the request ends; it forgets only this request's entry, never that of a
// later request with the same id.
func (in *inflight) track(ctx context.Context, id json.RawMessage) (_ context.Context, forget func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	t := in.add(id, cancel)
	return ctx, func() {
		in.remove(t)
		cancel(nil)
	}
}

// add records the request id as cancellable by cancel (called with a nil
// cause); remove must be given the entry when the request ends.
func (in *inflight) add(id json.RawMessage, cancel context.CancelCauseFunc) *tracked {
	t := &tracked{key: string(id), cancel: cancel}
	in.mu.Lock()
	if in.m == nil {
		in.m = make(map[string]*tracked)
	}
	in.m[t.key] = t
	in.mu.Unlock()
	return t
}

// remove forgets t, and only t: a later request that reused its id keeps
// its entry.
func (in *inflight) remove(t *tracked) {
	in.mu.Lock()
	if in.m[t.key] == t {
		delete(in.m, t.key)
	}
	in.mu.Unlock()
}

// cancelNamed cancels the request whose id the params of a
// notifications/cancelled name; params that name none cancel nothing.
func (in *inflight) cancelNamed(params json.RawMessage) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || len(p.RequestID) == 0 {
		return
	}
	in.mu.Lock()
	t := in.m[string(p.RequestID)]
	in.mu.Unlock()
	if t != nil {
		t.cancel(nil)
	}
}

// cancelAll cancels every request in progress (the session ended or lost
// its grant); each still forgets itself.
func (in *inflight) cancelAll() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, t := range in.m {
		t.cancel(nil)
	}
}
