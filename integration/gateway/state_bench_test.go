//go:build unix

package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/integration/internal/itest"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// BenchmarkStateStore compares a replica on the Redis store with one on
// the files store, in the same run, over the same upstream and with the
// same config but for [state]:
//
//   - files/call, redis/call: tools/call of a tiny tool on a legacy
//     session, pins on (server.pin = "quarantine"). The store should not
//     be on this path at all.
//   - files/stateless-limited, redis/stateless-limited: a 2026-07-28
//     stateless tools/call whose profile has a rate limit too high ever
//     to refuse, so that every call takes a token from its caller's bucket:
//     the one call path where the store belongs.
//
// Each sub-benchmark alternates one call to its own replica, timed, with
// one call to the other replica of its pair, untimed, so that a shared
// machine's drift hits both replicas alike; its ns/op is the mean of its
// own calls only, and redis/files is the ratio of the two means of that
// same run. The redis sub-benchmarks also report store-cmds/op: the
// commands redis-server counted (INFO commandstats, less the health
// checks' PING and the benchmark's own INFO) per call, each kind logged;
// the commands a script runs count too, so one take of a rate bucket (an
// EVALSHA, one round trip) shows as evalsha, hmget, hset, pexpire and
// time. redis/take is that take alone, from this process: about what the
// store can add to a rate-limited stateless call.
//
//	go test -run '^$' -bench BenchmarkStateStore -benchtime 3s -count 3 ./integration/gateway
func BenchmarkStateStore(b *testing.B) {
	env := benchStart(b, benchNeverRefuse)
	pairs := []struct {
		name string
		call func(m *benchMux) func(testing.TB)
	}{
		{"call", func(m *benchMux) func(testing.TB) { return m.sessionCall(b) }},
		{"stateless-limited", func(m *benchMux) func(testing.TB) { return m.statelessCall }},
	}
	for _, p := range pairs {
		files, redis := p.call(env.files), p.call(env.redis)
		b.Run("files/"+p.name, func(b *testing.B) { benchAlternate(b, files, redis, nil) })
		b.Run("redis/"+p.name, func(b *testing.B) { benchAlternate(b, redis, files, env.store) })
	}
	b.Run("redis/take", func(b *testing.B) {
		st := env.store.Open(b, state.RedisOptions{Prefix: "bench:"})
		ctx := context.Background()
		for b.Loop() {
			if ok, err := st.Take(ctx, "bench", benchNeverRefuse); !ok || err != nil {
				b.Fatalf("take from the bucket bench on %s: %v, %v", env.store.Addr(), ok, err)
			}
		}
	})
}

// benchNeverRefuse is the rate limit of the benchmark's limited profile:
// a bucket that holds more calls than a run can make.
const benchNeverRefuse = 100_000_000

// benchToken is the bearer token every benchmark request carries; its
// default profile, open, has no rate limit, and limited has one.
const benchToken = "bench-token"

// benchAlternate runs b.N calls of mine, each followed by a call of
// other, and reports the mean of mine as ns/op and mine/other as
// redis/files (mine is redis when store is not nil, else other is).
// With store, it also reports store-cmds/op and logs each command's share.
func benchAlternate(b *testing.B, mine, other func(testing.TB), store *statetest.Redis) {
	mine(b) // warm both connections before anything is counted
	other(b)
	var before map[string]benchCmd
	if store != nil {
		before = benchCommandStats(b, store)
	}
	var own, theirs time.Duration
	for b.Loop() {
		start := time.Now()
		mine(b)
		mid := time.Now()
		other(b)
		own += mid.Sub(start)
		theirs += time.Since(mid)
	}
	b.ReportMetric(float64(own.Nanoseconds())/float64(b.N), "ns/op")
	ratio := float64(own) / float64(theirs)
	if store == nil {
		ratio = 1 / ratio
	}
	b.ReportMetric(ratio, "redis/files")
	if store == nil {
		return
	}
	perOp, total := benchCommandsPerOp(before, benchCommandStats(b, store), b.N)
	b.ReportMetric(total, "store-cmds/op")
	if len(perOp) > 0 && b.N > 1 {
		b.Logf("store commands per call over %d calls: %s", b.N, strings.Join(perOp, " "))
	}
}

// benchCmd is what INFO commandstats says of one command: how many
// times redis-server ran it, and for how long in all.
type benchCmd struct{ calls, usec int64 }

// benchCommandsPerOp returns, sorted, the commands counted between before
// and after as "name=calls/n(µs of the server's time per call)" (those of
// a health check or of the benchmark itself left out), and their sum per
// call.
func benchCommandsPerOp(before, after map[string]benchCmd, n int) ([]string, float64) {
	var out []string
	total := 0.0
	for cmd, st := range after {
		d := st.calls - before[cmd].calls
		if d <= 0 || benchBackground(cmd) {
			continue
		}
		total += float64(d) / float64(n)
		out = append(out, fmt.Sprintf("%s=%.3g(%.3gµs)", cmd, float64(d)/float64(n), float64(st.usec-before[cmd].usec)/float64(d)))
	}
	slices.Sort(out)
	return out, total
}

// benchBackground reports whether a store command is not a request's:
// the engine's health check and pub/sub keep-alive (PING), and the
// benchmark's own INFO.
func benchBackground(cmd string) bool { return cmd == "ping" || cmd == "info" }

// benchCommandStats returns what redis-server has run, by command name
// (cmdstat_evalsha is "evalsha"), from INFO commandstats.
func benchCommandStats(tb testing.TB, r *statetest.Redis) map[string]benchCmd {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := r.Do(ctx, "INFO", "commandstats")
	if err != nil || len(reply) != 1 {
		tb.Fatalf("redis-server on %s: INFO commandstats: %v %q", r.Addr(), err, reply)
	}
	out := map[string]benchCmd{}
	sc := bufio.NewScanner(strings.NewReader(reply[0]))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st benchCmd
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			field := map[string]*int64{"calls": &st.calls, "usec": &st.usec}[k]
			if field == nil {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatalf("INFO commandstats: %s: %v", sc.Text(), err)
			}
			*field = n
		}
		out[name] = st
	}
	return out
}

// benchAwaitQuiet waits until redis-server runs no command but the
// background ones for 200ms: a replica that has just started is done
// taking in its own first writes (pins recorded on first sight come back
// to it on the change feed, and it reads them again). It fails tb after
// 10s without such a pause.
func benchAwaitQuiet(tb testing.TB, r *statetest.Redis) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	last := benchCommandStats(tb, r)
	for quiet := time.Now(); time.Since(quiet) < 200*time.Millisecond; {
		time.Sleep(50 * time.Millisecond)
		now := benchCommandStats(tb, r)
		if busy, _ := benchCommandsPerOp(last, now, 1); len(busy) > 0 {
			if time.Now().After(deadline) {
				tb.Fatalf("redis-server on %s is never quiet for 200ms; last 50ms: %s", r.Addr(), strings.Join(busy, " "))
			}
			quiet = time.Now()
		}
		last = now
	}
}

// benchEnv is one run's upstream, redis-server and two replicas.
type benchEnv struct {
	store *statetest.Redis
	files *benchMux // on the files store
	redis *benchMux // on store
}

// benchStart starts the upstream, a redis-server and the two replicas
// whose limited profile allows perMinute calls a minute. Everything is
// stopped when tb ends.
func benchStart(tb testing.TB, perMinute int) *benchEnv {
	tb.Helper()
	up := benchUpstream(tb)
	store := statetest.StartRedis(tb, statetest.Options{})
	return &benchEnv{
		store: store,
		files: benchStartMux(tb, benchConfig(tb.TempDir(), "", up, perMinute)),
		redis: benchStartMux(tb, benchConfig(tb.TempDir(), store.URL(), up, perMinute)),
	}
}

// benchConfig is a replica's config: pins on in stateDir, the store at
// stateURL ("" for files), the upstream up, and the token benchToken for
// the profiles open (no limit) and limited (perMinute).
func benchConfig(stateDir, stateURL, up string, perMinute int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[server]\npin = \"quarantine\"\nstate_dir = %q\n\n", stateDir)
	if stateURL != "" {
		fmt.Fprintf(&b, "[state]\nurl = %q\n\n", stateURL)
	}
	fmt.Fprintf(&b, "[upstreams.up]\nurl = %q\nrequired = true\n\n", up)
	fmt.Fprintf(&b, "[profiles.open]\n\n[profiles.limited]\nrate = { calls_per_minute = %d }\n\n", perMinute)
	fmt.Fprintf(&b, "[[auth.tokens]]\ntoken = %q\nprofiles = [\"open\", \"limited\"]\n", benchToken)
	return b.String()
}

// benchUpstream starts an mcp-go streamable HTTP server with one tool,
// ping, whose result is the text "pong", and returns its URL.
func benchUpstream(tb testing.TB) string {
	tb.Helper()
	srv := server.NewMCPServer("bench", "1.0.0", server.WithToolCapabilities(true))
	srv.AddTool(mcp.NewTool("ping", mcp.WithDescription("answers pong")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("pong"), nil
		})
	ts := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	tb.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// benchMux is one viewmux started by benchStartMux, with the HTTP client
// that calls it (its own keep-alive connection, so that the two replicas
// never share one).
type benchMux struct {
	addr   string
	cmd    *exec.Cmd
	done   chan struct{} // closed once cmd has been reaped
	stderr *itest.SyncBuffer
	client *http.Client
	next   int // JSON-RPC id of the next request
}

// benchStartMux runs `viewmux serve` with config, as itest.StartMux does
// for a test (a benchmark has no *testing.T to give it): its own process
// group and marker, ready once /readyz answers 200. At cleanup it is sent
// SIGTERM and must exit 0 within 20s; its stderr is logged if tb failed.
func benchStartMux(tb testing.TB, config string) *benchMux {
	tb.Helper()
	bin := itest.MuxBinary(tb)
	dir := tb.TempDir()
	path := filepath.Join(dir, "viewmux.toml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		tb.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		m := &benchMux{addr: itest.FreeAddr(tb), done: make(chan struct{}), stderr: &itest.SyncBuffer{},
			client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}}
		m.cmd = exec.Command(bin, "serve", "--config", path, "--listen", m.addr)
		m.cmd.Dir = dir
		m.cmd.Env = append(itest.EnvWithout(os.Environ(), "VIEWMUX_CONFIG", itest.MarkerEnv), itest.MarkerEnv+"="+itest.RandomHex(tb, 12))
		m.cmd.Stderr = m.stderr
		m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		m.cmd.WaitDelay = 2 * time.Second
		if err := m.cmd.Start(); err != nil {
			tb.Fatalf("start %s: %v", bin, err)
		}
		go func() { _ = m.cmd.Wait(); close(m.done) }() // the exit status is read from ProcessState
		tb.Cleanup(func() { m.stop(tb) })
		err := m.waitReady(30 * time.Second)
		if err == nil {
			return m
		}
		if attempt < 3 && m.exited() && strings.Contains(m.stderr.String(), "address already in use") {
			continue
		}
		tb.Fatalf("viewmux serve --config %s: %v\n--- config ---\n%s\n--- viewmux stderr ---\n%s", path, err, config, m.stderr.String())
	}
}

func (m *benchMux) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// waitReady polls /readyz until it answers 200, viewmux exits, or
// timeout passes.
func (m *benchMux) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if m.exited() {
			return fmt.Errorf("exited with code %d before /readyz answered 200", m.cmd.ProcessState.ExitCode())
		}
		resp, err := m.client.Get("http://" + m.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz did not answer 200 within %v (last: %v)", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit; a viewmux that does not
// exit within 20s has its process group killed.
func (m *benchMux) stop(tb testing.TB) {
	if tb.Failed() {
		tb.Logf("--- viewmux on %s stderr ---\n%s", m.addr, m.stderr.String())
	}
	if m.exited() {
		return
	}
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		tb.Errorf("SIGTERM viewmux on %s: %v", m.addr, err)
	}
	select {
	case <-m.done:
		if code := m.cmd.ProcessState.ExitCode(); code != 0 {
			tb.Errorf("viewmux on %s exited with code %d after SIGTERM, want 0\n%s", m.addr, code, m.stderr.String())
		}
	case <-time.After(20 * time.Second):
		tb.Errorf("viewmux on %s did not exit within 20s of SIGTERM; killing it", m.addr)
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.done
	}
}

// post sends one JSON-RPC message to /mcp with the token and headers,
// and returns the status, the Mcp-Session-Id header and the body.
func (m *benchMux) post(tb testing.TB, query string, headers map[string]string, body []byte) (int, string, []byte) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+m.addr+"/mcp"+query, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+benchToken)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		tb.Fatalf("POST %s to viewmux on %s: %v", body, m.addr, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("POST %s to viewmux on %s: reading the answer: %v", body, m.addr, err)
	}
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), out
}

// benchPong is what an answer of ping holds, and benchRefused what no
// answer of the benchmark may hold.
var (
	benchPong    = []byte(`"text":"pong"`)
	benchRefused = []byte(`"error":`)
)

// callBody is a tools/call of up__ping with the next id, and params
// (which must end in "}") after "params":.
func (m *benchMux) callBody(params string) []byte {
	m.next++
	return []byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(m.next) + `,"method":"tools/call","params":` + params + `}`)
}

// checkPong fails tb unless an answer is HTTP 200 with ping's result.
func (m *benchMux) checkPong(tb testing.TB, what string, status int, body []byte) {
	tb.Helper()
	if status != http.StatusOK || !bytes.Contains(body, benchPong) || bytes.Contains(body, benchRefused) {
		tb.Fatalf("%s through viewmux on %s: HTTP %d %s", what, m.addr, status, body)
	}
}

// sessionCall opens a legacy session on m's open profile and returns a
// call of up__ping on it.
func (m *benchMux) sessionCall(tb testing.TB) func(testing.TB) {
	tb.Helper()
	status, id, body := m.post(tb, "", nil, []byte(itest.InitializeBody()))
	if status != http.StatusOK || id == "" {
		tb.Fatalf("initialize on viewmux on %s: HTTP %d, session %q: %s", m.addr, status, id, body)
	}
	h := map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": itest.RawProtocolVersion}
	if status, _, body := m.post(tb, "", h, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); status != http.StatusAccepted && status != http.StatusOK {
		tb.Fatalf("notifications/initialized on session %s: HTTP %d %s", id, status, body)
	}
	return func(tb testing.TB) {
		status, _, body := m.post(tb, "", h, m.callBody(`{"name":"up__ping","arguments":{}}`))
		m.checkPong(tb, "tools/call on session "+id, status, body)
	}
}

// benchStatelessParams is a 2026-07-28 tools/call's params, and
// benchStatelessHeaders the headers that era's requests carry.
var (
	benchStatelessParams  = itest.WithModernMeta(`{"name":"up__ping","arguments":{}}`)
	benchStatelessHeaders = func() map[string]string {
		h := map[string]string{mcp.HeaderProtocolVersion: mcp.ProtocolVersion20260728}
		for k, v := range mcp.StandardHeaders(mcp.ProtocolVersion20260728, mcp.MethodToolsCall, json.RawMessage(benchStatelessParams)) {
			h[k] = v
		}
		return h
	}()
)

// stateless sends one stateless 2026-07-28 call of up__ping on the
// limited profile, and returns its status and body.
func (m *benchMux) stateless(tb testing.TB) (int, []byte) {
	tb.Helper()
	status, id, body := m.post(tb, "?profile=limited", benchStatelessHeaders, m.callBody(benchStatelessParams))
	if id != "" {
		tb.Fatalf("a stateless call on viewmux on %s was given session %q", m.addr, id)
	}
	return status, body
}

// statelessCall is a stateless call that must be answered with pong.
func (m *benchMux) statelessCall(tb testing.TB) {
	tb.Helper()
	status, body := m.stateless(tb)
	m.checkPong(tb, "stateless tools/call on profile limited", status, body)
}

// TestStateBenchSetup checks what BenchmarkStateStore takes for granted:
// both replicas answer both kinds of call; the limited profile's bucket
// is taken by every stateless call (with a limit of 3, the fourth call of
// a minute is refused, on either store); and a session's tools/call sends
// no command to the store.
func TestStateBenchSetup(t *testing.T) {
	t.Parallel()
	const limit = 3
	env := benchStart(t, limit)
	for _, tc := range []struct {
		name string
		m    *benchMux
	}{{"files", env.files}, {"redis", env.redis}} {
		t.Run(tc.name+" store: the fourth stateless call of a minute is refused", func(t *testing.T) {
			for range limit {
				tc.m.statelessCall(t)
			}
			status, body := tc.m.stateless(t)
			if !bytes.Contains(body, []byte(`"code":-32029`)) {
				t.Errorf("stateless call %d with calls_per_minute = %d: HTTP %d %s, want error -32029", limit+1, limit, status, body)
			}
		})
	}
	t.Run("redis store: a session's tools/call sends the store nothing", func(t *testing.T) {
		call := env.redis.sessionCall(t)
		call(t) // the session's first call may set up what later ones reuse
		benchAwaitQuiet(t, env.store)
		before := benchCommandStats(t, env.store)
		const n = 50
		for range n {
			call(t)
		}
		if perOp, _ := benchCommandsPerOp(before, benchCommandStats(t, env.store), n); len(perOp) > 0 {
			t.Errorf("%d tools/call on a session sent the store, per call: %s", n, strings.Join(perOp, " "))
		}
	})
}
