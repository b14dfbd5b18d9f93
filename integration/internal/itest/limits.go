//go:build unix

package itest

import (
	"net/http"
	"testing"
	"time"
)

// DeleteSession ends s with DELETE, sent with the session's headers (its
// token).
func DeleteSession(t *testing.T, s *RawSession) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, s.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range s.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Mcp-Session-Id", s.ID)
	req.Header.Set("Mcp-Protocol-Version", RawProtocolVersion)
	resp, err := RawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// WaitUntil polls cond every 100ms until it holds, failing after limit.
func WaitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
