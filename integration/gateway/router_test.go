//go:build unix

package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestDeployRouter runs the Kubernetes router of configs/examples/deploy/
// k8s.yaml — its nginx.conf, taken from the manifest — in front of two
// replicas named as the StatefulSet names its pods, viewmux-0 and viewmux-1.
// A small DNS server stands in for the cluster's: it resolves
// viewmux-<n>.viewmux-replicas.viewmux.svc.cluster.local to the loopback
// address replica n listens on (127.0.0.2, 127.0.0.3; both on the same
// port, as pods are), and nothing else. The test changes the manifest's
// nginx.conf only where a cluster differs from one machine: the resolver's
// address, the port, and the Service (kube-proxy's balancing), which becomes
// the two replicas.
func TestDeployRouter(t *testing.T) {
	itest.RequireNode(t)
	requireNginx(t)
	up := whoamiUpstream(t)
	port, replicas := startPods(t, up, "127.0.0.2", "127.0.0.3")
	dns := startDNS(t, map[string]net.IP{
		"viewmux-0.viewmux-replicas.viewmux.svc.cluster.local.": net.ParseIP("127.0.0.2"),
		"viewmux-1.viewmux-replicas.viewmux.svc.cluster.local.": net.ParseIP("127.0.0.3"),
	})
	manifest, err := os.ReadFile(filepath.Join(itest.Harness.Dir, "..", "configs", "examples", "deploy", "k8s.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	ng := startNginx(t, func(listen string) string {
		conf := yamlLiteral(t, string(manifest), "nginx.conf")
		for _, r := range []struct{ old, new string }{
			{"kube-dns.kube-system.svc.cluster.local", dns},
			{"server viewmux.viewmux.svc.cluster.local:8931;", fmt.Sprintf("server 127.0.0.2:%d; server 127.0.0.3:%d;", port, port)},
			{"svc.cluster.local:8931", fmt.Sprintf("svc.cluster.local:%d", port)},
			{"listen 8080;", "listen " + listen + ";"},
			{"/tmp/", tmp + "/"},
		} {
			if !strings.Contains(conf, r.old) {
				t.Fatalf("the router's nginx.conf no longer contains %q: update the test", r.old)
			}
			conf = strings.ReplaceAll(conf, r.old, r.new)
		}
		return conf
	})
	peer := startFleetPeer(t, ng.URL())

	on := map[string][]int{}
	for _, s := range peer.open(10) {
		if s.Error != nil {
			t.Fatalf("session %d did not open through the router: %v", s.Index, s.Error)
		}
		on[replicaOf(s.SessionID)] = append(on[replicaOf(s.SessionID)], s.Index)
	}
	t.Logf("10 sessions through the router: %v", on)
	if len(on["viewmux-0"]) == 0 || len(on["viewmux-1"]) == 0 || len(on) != 2 {
		t.Fatalf("sessions opened on %v, want both pods and nothing else", on)
	}

	t.Run("a session's requests reach its pod, found by DNS", func(t *testing.T) {
		for _, r := range peer.round(5, nil) {
			if !r.OK {
				t.Errorf("session %d (%s): %v", r.Index, r.SessionID, r.Error)
			}
			for i, got := range r.Texts {
				if got != replicaOf(r.SessionID) {
					t.Errorf("session %d (%s): call %d forwarded by %q", r.Index, r.SessionID, i, got)
				}
			}
		}
	})

	t.Run("an id naming no pod is 404", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, ng.URL(), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", "viewmux-7.mcp-session-ABCDEFGHIJKLMNOPQRSTUVWXYZ")
		req.Header.Set("Mcp-Protocol-Version", mcp.ProtocolVersion20251125)
		resp, err := itest.RawClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("a session of viewmux-7, which does not resolve: HTTP %d, want 404", resp.StatusCode)
		}
	})

	t.Run("a dead pod's sessions get 404 and initialize again on the other", func(t *testing.T) {
		dead := replicas["viewmux-1"]
		if err := dead.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if _, ok := dead.Wait(10 * time.Second); !ok {
			t.Fatal("viewmux-1 did not die")
		}
		for _, r := range peer.round(1, on["viewmux-1"]) {
			if r.OK || r.Error == nil || string(r.Error.Code) != "404" {
				t.Errorf("session %d of the dead pod: ok %v, error %v; want 404", r.Index, r.OK, r.Error)
			}
		}
		for _, s := range peer.reopen(on["viewmux-1"]) {
			if s.Error != nil || replicaOf(s.SessionID) != "viewmux-0" {
				t.Errorf("session %d initialized again as %q (%v), want a session of viewmux-0", s.Index, s.SessionID, s.Error)
			}
		}
		for _, r := range peer.round(2, nil) {
			if !r.OK || replicaOf(r.SessionID) != "viewmux-0" {
				t.Errorf("session %d (%s) after the reopen: %v", r.Index, r.SessionID, r.Error)
			}
		}
	})
}

// startPods starts one replica on each of ips, all on the same free port,
// as the pods of a StatefulSet listen; replica n is viewmux-<n>.
func startPods(t *testing.T, upstreamURL string, ips ...string) (int, map[string]*itest.Mux) {
	t.Helper()
	port := commonPort(t, ips)
	out := map[string]*itest.Mux{}
	for n, ip := range ips {
		id := fmt.Sprintf("viewmux-%d", n)
		dir := t.TempDir()
		path := filepath.Join(dir, "viewmux.toml")
		if err := os.WriteFile(path, []byte(replicaConfig(id, upstreamURL)), 0o600); err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort(ip, fmt.Sprint(port))
		args := []string{"serve", "--config", path, "--listen", addr}
		m, err := itest.LaunchMux(t, itest.MuxBinary(t), args, itest.MuxOptions{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m.Addr = addr
		if err := m.WaitReady(30 * time.Second); err != nil {
			t.Fatalf("%s on %s: %v\n%s", id, addr, err, m.Stderr())
		}
		out[id] = m
	}
	return port, out
}

// commonPort returns a TCP port free a moment ago on every one of ips.
func commonPort(t *testing.T, ips []string) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		free := true
		for _, ip := range ips[1:] {
			o, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
			if err != nil {
				free = false
				break
			}
			o.Close()
		}
		l.Close()
		if free {
			return port
		}
	}
	t.Fatalf("no port free on all of %v", ips)
	return 0
}

// startDNS serves A records for names (fully qualified, with the final
// dot) over UDP on loopback, answering NXDOMAIN for any other name, and
// returns its address. It knows just enough DNS for nginx's resolver: one
// question per query, class IN.
func startDNS(t *testing.T, names map[string]net.IP) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed at cleanup
			}
			if resp, ok := dnsAnswer(buf[:n], names); ok {
				pc.WriteTo(resp, from)
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return pc.LocalAddr().String()
}

// dnsAnswer answers one DNS query: the A record of its question's name if
// names has it, else no answer (NXDOMAIN, or an empty answer for a known
// name asked for another type).
func dnsAnswer(q []byte, names map[string]net.IP) ([]byte, bool) {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil, false
	}
	name, end, err := dnsName(q, 12)
	if err != nil || end+4 > len(q) {
		return nil, false
	}
	qtype := binary.BigEndian.Uint16(q[end : end+2])
	question := q[12 : end+4]
	resp := make([]byte, 12, 12+len(question)+16)
	copy(resp, q[:2])                           // id
	flags := uint16(0x8400) | uint16(q[2]&1)<<8 // response, authoritative, recursion desired echoed
	ip, known := names[strings.ToLower(name)]
	if !known {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(resp[2:4], flags)
	binary.BigEndian.PutUint16(resp[4:6], 1) // one question
	resp = append(resp, question...)
	if known && qtype == 1 {
		binary.BigEndian.PutUint16(resp[6:8], 1) // one answer
		resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4)
		resp = append(resp, ip.To4()...)
	}
	return resp, true
}

// dnsName reads the uncompressed name at off and returns it with a final
// dot, and the offset after it.
func dnsName(b []byte, off int) (string, int, error) {
	var labels []string
	for {
		if off >= len(b) {
			return "", 0, errors.New("truncated name")
		}
		n := int(b[off])
		off++
		if n == 0 {
			return strings.Join(labels, ".") + ".", off, nil
		}
		if n > 63 || off+n > len(b) {
			return "", 0, errors.New("bad label")
		}
		labels = append(labels, string(b[off:off+n]))
		off += n
	}
}
