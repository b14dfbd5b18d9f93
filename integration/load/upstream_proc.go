package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// upstreamEnv, set to the number of extra tools, makes this program run as
// the upstream server only (--upstream process re-executes itself so).
const upstreamEnv = "VIEWMUX_LOAD_UPSTREAM"

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
// the direct baseline crosses a process boundary as the viewmux path does.
func childUpstream(ctx context.Context, extra int) (*upstreamHandle, error) {
	ch, err := startSelfChild(ctx, "upstream", upstreamEnv+"="+strconv.Itoa(extra))
	if err != nil {
		return nil, err
	}
	countsURL := strings.TrimSuffix(ch.url, "/mcp") + "/counts"
	hc := &http.Client{Timeout: 10 * time.Second}
	return &upstreamHandle{
		url: ch.url,
		pid: ch.pid,
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
		close: ch.stop,
	}, nil
}

// serveUpstreamChild is main for the re-executed upstream child.
func serveUpstreamChild(extraEnv string) error {
	extra, err := strconv.Atoi(extraEnv)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", upstreamEnv, extraEnv, err)
	}
	u, err := startUpstream(extra)
	if err != nil {
		return err
	}
	return serveAsChild(u.url, u.close)
}
