package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// upstreamEnv, set to the number of extra tools, makes this program run as
// the upstream server only (--upstream process re-executes itself so).
const upstreamEnv = "MCPMUX_LOAD_UPSTREAM"

// upstreamHandle is the upstream as the measurement sees it, whether it
// runs in this process or in a child.
type upstreamHandle struct {
	url    string // http://127.0.0.1:PORT/mcp
	pid    int    // the child's, 0 when in this process
	counts func() (counts, error)
	close  func() error
}

func inProcessUpstream(extra int) (*upstreamHandle, error) {
	u, err := startUpstream(extra)
	if err != nil {
		return nil, err
	}
	return &upstreamHandle{
		url:    u.url,
		counts: func() (counts, error) { return u.snapshot(), nil },
		close:  u.close,
	}, nil
}

// childUpstream re-executes this program as the upstream server, so that
// the direct baseline crosses a process boundary as the mcpmux path does.
func childUpstream(ctx context.Context, extra int) (*upstreamHandle, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), upstreamEnv+"="+strconv.Itoa(extra))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = childAttr()
	stdin, err := cmd.StdinPipe() // closing it tells the child to stop
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start upstream child: %w", err)
	}
	exited := make(chan error, 1)
	stop := func() error {
		stdin.Close()
		select {
		case err := <-exited:
			return err
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			return <-exited
		}
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	var url string
	select {
	case url = <-lines:
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
	}
	if !strings.HasPrefix(url, "http://") {
		_ = stop()
		return nil, fmt.Errorf("upstream child did not report its URL (got %q)", url)
	}
	countsURL := strings.TrimSuffix(url, "/mcp") + "/counts"
	hc := &http.Client{Timeout: 10 * time.Second}
	return &upstreamHandle{
		url: url,
		pid: cmd.Process.Pid,
		counts: func() (counts, error) {
			var c counts
			resp, err := hc.Get(countsURL)
			if err != nil {
				return c, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return c, fmt.Errorf("GET %s: %s", countsURL, resp.Status)
			}
			return c, json.NewDecoder(resp.Body).Decode(&c)
		},
		close: stop,
	}, nil
}

// serveUpstreamChild is main for the re-executed child: serve, print the
// URL, and stop when stdin closes (the parent is done or gone) or on a
// signal.
func serveUpstreamChild(extraEnv string) error {
	extra, err := strconv.Atoi(extraEnv)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", upstreamEnv, extraEnv, err)
	}
	u, err := startUpstream(extra)
	if err != nil {
		return err
	}
	fmt.Println(u.url)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	<-ctx.Done()
	return u.close()
}
