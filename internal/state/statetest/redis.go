// Package statetest runs a real redis-server for tests: on a free port of
// the loopback interface, in a directory of the test's, with persistence
// off unless asked. It can be stopped and started again on the same
// port, to test outages. With CI=true a missing redis-server fails the
// test; otherwise it skips.
package statetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/internal/state"
)

// Redis is one redis-server of a test.
type Redis struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
	out *syncWriter
}

// Options for StartRedis.
type Options struct {
	// AOF turns on the append-only file (appendfsync always), so that a
	// restart keeps what was written.
	AOF bool
	// Password requires AUTH with it.
	Password string
}

// Binary returns the path of redis-server, failing t (CI=true) or
// skipping it when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/redis-server"); serr == nil {
			return "/usr/bin/redis-server"
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found (Debian package redis-server; .ci/run installs it): %v", err)
		}
		t.Skipf("redis-server not found (apt-get install redis-server): %v", err)
	}
	return bin
}

// StartRedis starts a redis-server and stops it when the test ends.
func StartRedis(t testing.TB, o Options) *Redis {
	t.Helper()
	r := &Redis{t: t, bin: Binary(t), dir: t.TempDir()}
	r.args = []string{"--bind", "127.0.0.1", "--save", "", "--dir", r.dir,
		"--daemonize", "no", "--logfile", "", "--protected-mode", "no"}
	if o.AOF {
		r.args = append(r.args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		r.args = append(r.args, "--appendonly", "no")
	}
	if o.Password != "" {
		r.args = append(r.args, "--requirepass", o.Password)
	}
	var last error
	for try := 0; try < 5; try++ {
		r.port = freePort(t)
		if last = r.start(); last == nil {
			t.Cleanup(func() { r.Stop() })
			return r
		}
	}
	t.Fatalf("redis-server: %v", last)
	return nil
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs redis-server on r.port and waits until it answers PING.
func (r *Redis) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	out := &syncWriter{w: &bytes.Buffer{}}
	cmd := exec.Command(r.bin, append([]string{"--port", strconv.Itoa(r.port)}, r.args...)...)
	cmd.Dir = r.dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("exited before answering (%v):\n%s", err, out.String())
		default:
		}
		if ping(r.Addr(), r.password()) == nil {
			r.cmd, r.out = cmd, out
			go func() { <-exited }()
			return nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return fmt.Errorf("no answer to PING on %s within 10s:\n%s", r.Addr(), out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *Redis) password() string {
	for i, a := range r.args {
		if a == "--requirepass" && i+1 < len(r.args) {
			return r.args[i+1]
		}
	}
	return ""
}

// ping sends PING (after AUTH, with a password) and reads +PONG.
func ping(addr, password string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	rd := bufio.NewReader(c)
	if password != "" {
		fmt.Fprintf(c, "AUTH %s\r\n", password)
		if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("AUTH: %q %v", line, err)
		}
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

// Addr is host:port.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// URL is the redis:// URL of the server, with its password if any.
func (r *Redis) URL() string {
	if p := r.password(); p != "" {
		return "redis://:" + p + "@" + r.Addr() + "/0"
	}
	return "redis://" + r.Addr() + "/0"
}

// Open returns a store on the server, with o's other options, closed when
// the test ends: a replica's handle.
func (r *Redis) Open(t testing.TB, o state.RedisOptions) *state.Redis {
	t.Helper()
	o.URL = r.URL()
	st, err := state.OpenRedis(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Dir is the server's working directory (its AOF, when on).
func (r *Redis) Dir() string { return r.dir }

// Stop kills the server (SIGKILL: what an outage looks like) and waits
// until its port no longer answers.
func (r *Redis) Stop() {
	r.mu.Lock()
	cmd := r.cmd
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	for i := 0; i < 500 && ping(r.Addr(), r.password()) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
}

// Start starts the server again on its port, after Stop.
func (r *Redis) Start() {
	r.t.Helper()
	var err error
	for i := 0; i < 50; i++ { // the port may linger a moment after a kill
		if err = r.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Fatalf("redis-server restart on %s: %v", r.Addr(), err)
}

// Do runs one command with redis-cli semantics over a raw connection and
// returns the reply line(s) as text: for tests that look at the store
// from outside viewmux. Only simple and bulk replies and flat arrays.
func (r *Redis) Do(ctx context.Context, args ...string) ([]string, error) {
	c, err := net.DialTimeout("tcp", r.Addr(), time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(5 * time.Second))
	}
	rd := bufio.NewReader(c)
	if p := r.password(); p != "" {
		if err := writeCmd(c, "AUTH", p); err != nil {
			return nil, err
		}
		if _, err := readReply(rd); err != nil {
			return nil, err
		}
	}
	if err := writeCmd(c, args...); err != nil {
		return nil, err
	}
	return readReply(rd)
}

func writeCmd(c net.Conn, args ...string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := c.Write(b.Bytes())
	return err
}

func readReply(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return []string{line[1:]}, nil
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return []string{string(buf[:n])}, nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		var out []string
		for i := 0; i < n; i++ {
			v, err := readReply(rd)
			if err != nil {
				return nil, err
			}
			out = append(out, v...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("reply %q", line)
}

// Dump returns every key in the server with their values as strings (a
// hash's fields and values one after the other), for tests that check
// what the store holds.
func (r *Redis) Dump(ctx context.Context) (map[string][]string, error) {
	keys, err := r.Do(ctx, "KEYS", "*")
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, k := range keys {
		typ, err := r.Do(ctx, "TYPE", k)
		if err != nil || len(typ) == 0 {
			continue
		}
		var v []string
		switch typ[0] {
		case "string":
			v, err = r.Do(ctx, "GET", k)
		case "hash":
			v, err = r.Do(ctx, "HGETALL", k)
		case "zset":
			v, err = r.Do(ctx, "ZRANGE", k, "0", "-1")
		default:
			continue
		}
		if err != nil {
			continue // expired since KEYS
		}
		out[k] = v
	}
	return out, nil
}

// Log returns what the server printed.
func (r *Redis) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.out == nil {
		return ""
	}
	return r.out.String()
}

// Path of a file in the server's directory.
func (r *Redis) Path(name string) string { return filepath.Join(r.dir, name) }

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
