//go:build unix

package itest

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// GetWithToken GETs url with a bearer token and returns the body of its
// 200 answer, failing the test on anything else.
func GetWithToken(t *testing.T, url, token string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %v\n%s", url, resp.Status, err, b)
	}
	return string(b)
}
