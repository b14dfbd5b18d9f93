package state_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// waitFor polls cond every 20ms until it holds or 15s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisOutage stops the server under a store and starts it again: the
// store says it is down (DownError, Health), a watcher is told to read
// again once the subscription is back, and everything resumes without a
// new store.
func TestRedisOutage(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{AOF: true})
	s := srv.Open(t, state.RedisOptions{Timeout: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Update(ctx, "pins.json", func([]byte) ([]byte, error) { return []byte("v1"), nil }); err != nil {
		t.Fatal(err)
	}
	watch := s.Watch(ctx)
	waitFor(t, "the subscription's first resync", func() bool {
		select {
		case k := <-watch:
			return k == ""
		default:
			return false
		}
	})
	if h := s.Health(); !h.Up {
		t.Fatalf("Health before the outage = %+v", h)
	}

	srv.Stop()
	_, err := s.Get(ctx, "pins.json")
	if !state.IsDown(err) {
		t.Fatalf("Get with the server stopped = %v; want a DownError", err)
	}
	if !strings.Contains(err.Error(), srv.Addr()) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("the error %q does not say which store is unreachable", err)
	}
	if h := s.Health(); h.Up || h.Err == "" {
		t.Errorf("Health during the outage = %+v; want down, with why", h)
	}
	if _, err := s.Take(ctx, "k", 10); !state.IsDown(err) {
		t.Errorf("Take during the outage = %v; want a DownError (the caller decides the fallback)", err)
	}
	if err := s.PutOnce(ctx, "tickets", "a", state.NewKey(), nil, state.Limits{}); !state.IsDown(err) {
		t.Errorf("PutOnce during the outage = %v; want a DownError", err)
	}

	srv.Start()
	// Without any command of ours, the monitor brings the store up.
	waitFor(t, "Health up after the restart", func() bool { return s.Health().Up })
	got, err := s.Get(ctx, "pins.json")
	if err != nil || string(got) != "v1" {
		t.Errorf("Get after the restart = %q, %v; want v1 (kept by the AOF)", got, err)
	}
	waitFor(t, "a resync after the watcher's reconnect", func() bool {
		select {
		case k := <-watch:
			return k == ""
		default:
			return false
		}
	})
}

// TestRedisLockLapses: a holder that dies without unlocking loses the lock
// at its TTL, and its late unlock does not release the next holder's.
func TestRedisLockLapses(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	a, b, c := srv.Open(t, state.RedisOptions{}), srv.Open(t, state.RedisOptions{}), srv.Open(t, state.RedisOptions{})
	ctx := context.Background()
	staleUnlock, err := a.Lock(ctx, "refresh-github", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	unlock, err := b.Lock(ctx, "refresh-github", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("the second holder got the lock after %v, before the first one's TTL", d)
	}
	staleUnlock() // the first holder wakes up late
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if u, err := c.Lock(short, "refresh-github", time.Second); err == nil {
		u()
		t.Fatal("a stale unlock released another holder's lock")
	}
	unlock()
}

// TestRedisURL: a bad URL is refused with its password hidden; a password
// the server wants is used.
func TestRedisURL(t *testing.T) {
	if _, err := state.OpenRedis(state.RedisOptions{URL: "redis://:hunter2@host:notaport/0"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("OpenRedis of a bad URL = %v; want an error without the password", err)
	}
	srv := statetest.StartRedis(t, statetest.Options{Password: "s3cret-pass"})
	s := srv.Open(t, state.RedisOptions{})
	if err := s.Update(context.Background(), "x", func([]byte) ([]byte, error) { return []byte("1"), nil }); err != nil {
		t.Fatalf("Update with the password: %v", err)
	}
	if strings.Contains(s.Where(), "s3cret") {
		t.Errorf("Where() = %q shows the password", s.Where())
	}
	wrong := strings.Replace(srv.URL(), "s3cret-pass", "wrong", 1)
	w, err := state.OpenRedis(state.RedisOptions{URL: wrong})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, err = w.Get(context.Background(), "x")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Get with a wrong password = %v; want an error", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Error(err)
	}
}

// lockedBuffer is a log destination safe for the monitor's goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRedisOutageIsLogged: an outage is one WARN when it begins, however
// many commands fail, and an INFO when the server answers again.
func TestRedisOutageIsLogged(t *testing.T) {
	t.Parallel()
	srv := statetest.StartRedis(t, statetest.Options{})
	var logs lockedBuffer
	s := srv.Open(t, state.RedisOptions{Timeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil)), WarnEvery: time.Hour})
	ctx := context.Background()
	waitFor(t, "Health up", func() bool { return s.Health().Up })

	srv.Stop()
	for range 5 {
		if _, err := s.Get(ctx, "pins.json"); !state.IsDown(err) {
			t.Fatalf("Get with the server stopped = %v; want a DownError", err)
		}
	}
	waitFor(t, "the outage's WARN", func() bool { return strings.Contains(logs.String(), "level=WARN") })
	// The monitor pings every second while the server is down: give it
	// three more tries to log again, which it must not within WarnEvery.
	deadline := time.Now().Add(3 * time.Second)
	waitFor(t, "three more pings", func() bool { return time.Now().After(deadline) })
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d WARN lines for one outage and 5 failed commands; want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), srv.Addr()) {
		t.Errorf("the WARN does not name the store %s:\n%s", srv.Addr(), logs.String())
	}

	srv.Start()
	waitFor(t, "the INFO of the recovery", func() bool { return strings.Contains(logs.String(), "state store answers again") })
}

// TestRedisOutageIsLoggedAgain: a long outage is logged again every
// WarnEvery.
func TestRedisOutageIsLoggedAgain(t *testing.T) {
	t.Parallel()
	srv := statetest.StartRedis(t, statetest.Options{})
	var logs lockedBuffer
	s := srv.Open(t, state.RedisOptions{Timeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil)), WarnEvery: time.Second})
	waitFor(t, "Health up", func() bool { return s.Health().Up })
	srv.Stop()
	s.Get(context.Background(), "pins.json")
	waitFor(t, "a second WARN", func() bool { return strings.Count(logs.String(), "level=WARN") >= 2 })
}
