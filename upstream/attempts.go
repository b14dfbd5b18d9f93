package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/client/transport"
)

// attempt is one way of connecting that was tried, and how it failed.
type attempt struct {
	label string // how it was tried; "" for the first, plain attempt
	err   error
}

// attempts are the failed ways of connecting one dial tried, in order.
type attempts []attempt

// err returns one error that keeps each attempt's own: "label: error",
// joined by "; ". An attempt that failed with the same text as an earlier
// one is left out, so a fallback that hit the same wall does not repeat it;
// when only an unlabelled attempt is left, its error is returned as is.
func (as attempts) err() error {
	var kept attempts
	for _, a := range as {
		if !seenText(kept, a.err.Error()) {
			kept = append(kept, a)
		}
	}
	if len(kept) == 1 && kept[0].label == "" {
		return kept[0].err
	}
	return &attemptsError{kept}
}

// seenText reports whether an attempt in as failed with text.
func seenText(as attempts, text string) bool {
	for _, a := range as {
		if a.err.Error() == text {
			return true
		}
	}
	return false
}

// attemptsError is the error of a dial whose every attempt failed.
type attemptsError struct{ tried attempts }

func (e *attemptsError) Error() string {
	parts := make([]string, len(e.tried))
	for i, a := range e.tried {
		if a.label == "" {
			parts[i] = a.err.Error()
		} else {
			parts[i] = a.label + ": " + a.err.Error()
		}
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns each attempt's error, for errors.Is and errors.As.
func (e *attemptsError) Unwrap() []error {
	errs := make([]error, len(e.tried))
	for i, a := range e.tried {
		errs[i] = a.err
	}
	return errs
}

// maxRefusalBody bounds the bytes of a refusal's body kept for an error.
const maxRefusalBody = 200

// refusalTap remembers the last HTTP error status an endpoint answered, and
// the start of its body, for the error of an attempt that mcp-go reports
// without them. Safe for concurrent use.
type refusalTap struct {
	next http.RoundTripper

	mu     sync.Mutex
	status string // "403 Forbidden"; "" = none seen
	body   string
}

// tapRefusals puts a refusalTap in front of hc's transport.
func tapRefusals(hc *http.Client) *refusalTap {
	t := &refusalTap{next: hc.Transport}
	hc.Transport = t
	return t
}

func (t *refusalTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	var body string
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/html" {
		buf := make([]byte, maxRefusalBody)
		n, _ := io.ReadFull(resp.Body, buf)
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf[:n]), resp.Body), resp.Body}
		body = strings.Join(strings.Fields(string(buf[:n])), " ")
	}
	t.mu.Lock()
	t.status, t.body = resp.Status, body
	t.mu.Unlock()
	return resp, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach next.
func (t *refusalTap) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// explain adds the refusal seen to err when err is one of mcp-go's that
// name no status (a 4xx to initialize, a 401).
func (t *refusalTap) explain(err error) error {
	if !errors.Is(err, transport.ErrLegacySSEServer) && !errors.Is(err, transport.ErrUnauthorized) {
		return err
	}
	t.mu.Lock()
	status, body := t.status, t.body
	t.mu.Unlock()
	switch {
	case status == "":
		return err
	case body == "":
		return fmt.Errorf("%w (the endpoint answered HTTP %s)", err, status)
	}
	return fmt.Errorf("%w (the endpoint answered HTTP %s: %q)", err, status, body)
}
