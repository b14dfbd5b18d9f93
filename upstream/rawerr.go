package upstream

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
)

// mcp-go's transports decode an upstream's JSON-RPC error into
// JSONRPCErrorDetails, whose Data is an `any`: numbers go through float64
// and integers past 2^53 come out changed. SPEC §7 wants errors to reach
// the client unchanged, so every connection taps the bytes its transport
// reads and keeps the raw error object of each answer to a request Send
// made (ids "mcpmux-<n>"); Send takes it from there.

// rawErrors holds raw error objects by request id until Send takes them.
// Its zero value is ready; it is safe for concurrent use.
type rawErrors struct {
	mu sync.Mutex
	m  map[string]json.RawMessage
}

// maxRawErrors bounds the requests a connection keeps raw errors for at
// once; past it, answers get the decoded data.
const maxRawErrors = 4096

// maxTapped bounds the bytes of one message the tap looks at; a larger
// error object is passed on decoded.
const maxTapped = 64 << 10

// observe records msg's error object if msg is an error answer to one of
// Send's requests.
func (r *rawErrors) observe(msg []byte) {
	if !bytes.Contains(msg, []byte(`"error"`)) || !bytes.Contains(msg, []byte(`"mcpmux-`)) {
		return
	}
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error json.RawMessage `json:"error"`
	}
	var id string
	if json.Unmarshal(msg, &m) != nil || len(m.Error) == 0 || json.Unmarshal(m.ID, &id) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, expected := r.m[id]; expected {
		r.m[id] = m.Error
	}
}

// expect records that Send waits for an answer to id; only such answers
// are kept, so a late answer to a request Send gave up on is not.
func (r *rawErrors) expect(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]json.RawMessage)
	}
	if len(r.m) < maxRawErrors {
		r.m[id] = nil
	}
}

// take returns and forgets the raw error object of request id, or nil.
func (r *rawErrors) take(id string) json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	raw := r.m[id]
	delete(r.m, id)
	return raw
}

// forget drops what is kept for id (Send calls it when it got no error,
// or gave up).
func (r *rawErrors) forget(id string) {
	r.mu.Lock()
	delete(r.m, id)
	r.mu.Unlock()
}

// tapReader passes reads through and shows each complete message it read
// to observe: every line (stdio's framing; for an event stream, the
// "data:" lines), or, with whole, the body as one message once it is
// valid JSON. It buffers at most maxTapped bytes of a message.
type tapReader struct {
	r       io.Reader
	whole   bool
	observe func([]byte)
	buf     []byte
	skip    bool // the current message outgrew maxTapped
	done    bool // whole: the message was observed
}

func (t *tapReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		if t.whole {
			t.feedWhole(p[:n])
		} else {
			t.feedLines(p[:n])
		}
	}
	return n, err
}

func (t *tapReader) feedWhole(b []byte) {
	if t.done || t.skip {
		return
	}
	if len(t.buf)+len(b) > maxTapped {
		t.skip, t.buf = true, nil
		return
	}
	t.buf = append(t.buf, b...)
	if bytes.Contains(t.buf, []byte(`"error"`)) && json.Valid(t.buf) {
		t.done = true
		t.observe(t.buf)
		t.buf = nil
	}
}

func (t *tapReader) feedLines(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if !t.skip {
			if len(t.buf)+len(chunk) > maxTapped {
				t.skip, t.buf = true, t.buf[:0]
			} else {
				t.buf = append(t.buf, chunk...)
			}
		}
		if i < 0 {
			return
		}
		if !t.skip {
			line := bytes.TrimSuffix(t.buf, []byte("\r"))
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				line = bytes.TrimPrefix(d, []byte(" "))
			}
			t.observe(line)
		}
		t.buf, t.skip = t.buf[:0], false
		b = b[i+1:]
	}
}

// tapBody is a tapReader over a response body.
type tapBody struct {
	tapReader
	c io.Closer
}

func (t *tapBody) Close() error { return t.c.Close() }
