package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/viewmux/viewmux/internal/onetime"
	"github.com/viewmux/viewmux/internal/ratelimit"
	"github.com/viewmux/viewmux/internal/statedir"
)

// Files is the files engine: each document is a file of the state
// directory named by its key (0600, replaced whole through a rename), each
// Update holds an advisory lock beside it, and Watch follows the directory
// with fsnotify. Once values, buckets and locks' waiting live in this
// process: one machine, several processes sharing documents.
type Files struct {
	dir statedir.Dir
	// Logger hears what the engine cannot do for want of the operating
	// system's help: a directory it cannot watch. Set it before the first
	// Watch; nil = nothing is logged.
	Logger *slog.Logger

	mu    sync.Mutex
	once  map[string]*onetime.Store[[]byte] // by namespace
	limit ratelimit.Limiters
}

// OpenFiles returns the files engine of the state directory dir. It does
// no I/O: the directory is created on first write.
func OpenFiles(dir string) *Files {
	return &Files{dir: statedir.Dir{Path: dir}, once: map[string]*onetime.Store[[]byte]{}}
}

func (f *Files) Engine() string { return "files" }
func (f *Files) Where() string  { return f.dir.Path }

// Health is always up: a file that cannot be read fails its own command.
func (f *Files) Health() Health { return Health{Up: true} }
func (f *Files) Close() error   { return nil }

// Dir returns the state directory.
func (f *Files) Dir() statedir.Dir { return f.dir }

// lockFile is the lock an Update of key, or Lock(key), holds: a dot file,
// which List and Watch ignore.
func lockFile(key string) string { return ".lock-" + key }

func (f *Files) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("document", key); err != nil {
		return nil, err
	}
	return f.dir.ReadFile(key)
}

func (f *Files) Update(ctx context.Context, key string, fn func(cur []byte) ([]byte, error)) error {
	if err := checkKey("document", key); err != nil {
		return err
	}
	unlock, err := f.dir.Lock(lockFile(key))
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := f.dir.ReadFile(key)
	if err != nil {
		return fmt.Errorf("state file %s: %w", f.dir.File(key), err)
	}
	next, err := fn(cur)
	if errors.Is(err, ErrUnchanged) || err == nil && cur != nil && bytes.Equal(cur, next) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.dir.WriteFile(key, next)
}

func (f *Files) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkKey("document", key); err != nil {
		return false, err
	}
	if f.dir.Path == "" {
		return false, statedir.ErrNoDir
	}
	unlock, err := f.dir.Lock(lockFile(key))
	if err != nil {
		return false, err
	}
	defer unlock()
	err = os.Remove(f.dir.File(key))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state file: %w", err)
	}
	return true, nil
}

func (f *Files) List(ctx context.Context, prefix string) ([]Entry, error) {
	if f.dir.Path == "" {
		return nil, statedir.ErrNoDir
	}
	entries, err := os.ReadDir(f.dir.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state_dir %s: %w", f.dir.Path, err)
	}
	var out []Entry
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !e.Type().IsRegular() || checkKey("document", name) != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		out = append(out, Entry{Key: name, Modified: fi.ModTime()})
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return b.Modified.Compare(a.Modified) })
	return out, nil
}

// watchBuffer is how many keys a watcher may leave unread before the
// rest fold into one "".
const watchBuffer = 64

// Watch follows the state directory. It creates the directory if it does
// not exist, so that a document written later is seen. When the
// directory cannot be watched, the channel gets one "" and is closed at
// ctx's end: the caller keeps what it read.
func (f *Files) Watch(ctx context.Context) <-chan string {
	out := newWatchChan(ctx)
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = f.dir.Ensure(); err == nil {
			err = w.Add(f.dir.Path)
		}
		if err != nil {
			w.Close()
		}
	}
	if err != nil {
		if f.Logger != nil {
			f.Logger.Warn("cannot watch the state directory: changes made by another process (`viewmux pins approve`, another replica on a shared disk) are picked up at the next reload or SIGHUP",
				"dir", f.dir.Path, "error", err)
		}
		out.send("")
		return out.c
	}
	go func() {
		defer out.close()
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				name := filepath.Base(ev.Name)
				if checkKey("document", name) != nil {
					continue // temporary files, locks
				}
				out.send(name)
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
				out.send("") // an overflow: events were lost
			}
		}
	}()
	return out.c
}

// onceStore returns namespace ns's values, made with lim by the first
// PutOnce of ns (create); nil when ns has none and create is false, so
// that a Take or Peek never fixes a namespace's limits.
func (f *Files) onceStore(ns string, lim Limits, create bool) *onetime.Store[[]byte] {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.once[ns]
	if s == nil && create {
		lim = lim.withDefaults()
		s = &onetime.Store[[]byte]{TTL: lim.TTL, Max: lim.Max, PerOwner: lim.PerOwner}
		f.once[ns] = s
	}
	return s
}

func (f *Files) PutOnce(ctx context.Context, ns, owner, key string, val []byte, lim Limits) error {
	if err := checkKey("namespace", ns); err != nil {
		return err
	}
	if err := checkKey("once", key); err != nil {
		return err
	}
	err := f.onceStore(ns, lim, true).PutAs(owner, key, bytes.Clone(val))
	switch {
	case errors.Is(err, onetime.ErrFull):
		return ErrFull
	case err != nil:
		return ErrKeyInUse
	}
	return nil
}

func (f *Files) TakeOnce(ctx context.Context, ns, key string) ([]byte, string, bool, error) {
	if checkKey("namespace", ns) != nil || checkKey("once", key) != nil {
		return nil, "", false, nil
	}
	s := f.onceStore(ns, Limits{}, false)
	if s == nil {
		return nil, "", false, nil
	}
	v, owner, ok := s.Take(key)
	return v, owner, ok, nil
}

func (f *Files) PeekOnce(ctx context.Context, ns, key string) ([]byte, string, bool, error) {
	if checkKey("namespace", ns) != nil || checkKey("once", key) != nil {
		return nil, "", false, nil
	}
	s := f.onceStore(ns, Limits{}, false)
	if s == nil {
		return nil, "", false, nil
	}
	v, owner, ok := s.Peek(key)
	return bytes.Clone(v), owner, ok, nil
}

func (f *Files) Take(ctx context.Context, key string, perMinute int) (bool, error) {
	return f.limit.Allow(key, perMinute), nil
}

func (f *Files) TakeUpTo(ctx context.Context, key string, perMinute, n int) (int, error) {
	got := 0
	for got < n && f.limit.Allow(key, perMinute) {
		got++
	}
	return got, nil
}

// Lock holds an advisory lock file of the state directory; ttl does not
// apply, since the kernel releases the lock of a process that dies.
func (f *Files) Lock(ctx context.Context, name string, ttl time.Duration) (func(), error) {
	if err := checkKey("lock", name); err != nil {
		return nil, err
	}
	type result struct {
		unlock func()
		err    error
	}
	done := make(chan result, 1)
	go func() {
		u, err := f.dir.Lock(lockFile(name))
		done <- result{u, err}
	}()
	select {
	case r := <-done:
		return r.unlock, r.err
	case <-ctx.Done():
		go func() { // release it when it comes
			if r := <-done; r.err == nil {
				r.unlock()
			}
		}()
		return nil, fmt.Errorf("state lock %s: %w", name, ctx.Err())
	}
}

// watchChan is a Watch channel that never blocks its sender: a pump
// delivers the queued keys, and keys past watchBuffer fold into one "".
// The channel is closed when ctx is done or close is called.
type watchChan struct {
	ctx  context.Context
	c    chan string
	wake chan struct{}
	stop chan struct{}

	mu      sync.Mutex
	queue   []string
	all     bool // keys were dropped: "" replaces the queue
	stopped bool
}

func newWatchChan(ctx context.Context) *watchChan {
	w := &watchChan{ctx: ctx, c: make(chan string), wake: make(chan struct{}, 1), stop: make(chan struct{})}
	go w.pump()
	return w
}

func (w *watchChan) send(key string) {
	w.mu.Lock()
	switch {
	case w.stopped || w.all:
	case key == "" || len(w.queue) >= watchBuffer:
		w.queue, w.all = nil, true
	case !slices.Contains(w.queue, key):
		w.queue = append(w.queue, key)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watchChan) pump() {
	defer close(w.c)
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.stop:
			return
		case <-w.wake:
		}
		w.mu.Lock()
		keys := w.queue
		if w.all {
			keys = []string{""}
		}
		w.queue, w.all = nil, false
		w.mu.Unlock()
		for _, k := range keys {
			select {
			case w.c <- k:
			case <-w.ctx.Done():
				return
			case <-w.stop:
				return
			}
		}
	}
}

func (w *watchChan) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.stop)
	}
}
