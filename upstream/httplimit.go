package upstream

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/viewmux/viewmux/upstream/h1"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// sseFieldSlack is the room an SSE event gets beyond the message itself for
// its "event:", "id:" and "data:" framing.
const sseFieldSlack = 64 << 10

// httpClient returns the HTTP client of one connection. Every response body
// is wrapped to stop at cfg.MaxMessageBytes: a JSON body in total, an event
// stream per event. There is no client timeout, which would cut the
// long-lived streams; calls are bounded by their ctx instead.
func (u *Upstream) httpClient() *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	// Every client session's calls share this one upstream connection
	// pool; the default of 2 idle connections per host made concurrent
	// calls open (and close) a TCP connection each.
	base.MaxIdleConnsPerHost = maxIdlePerUpstream
	// Plain http to the upstream's own origin is written and read on each
	// call's goroutine (h1); https, a proxy or another host go through
	// base.
	direct := h1.New(u.cfg.URL, base)
	direct.MaxIdle = maxIdlePerUpstream
	return &http.Client{
		Transport: &limitTransport{
			base: direct,
			max:  u.maxMessage(),
			onTooLarge: func(err error) {
				u.log.Error("message from upstream too large", "err", err)
			},
		},
		CheckRedirect: keepToOrigin(headerNames(u.cfg.Headers)),
	}
}

// withOAuth wraps rt, the transport of the streamable HTTP peers
// (newHTTPPeer) and of the legacy SSE transport, in the upstream's OAuth transport (the access token
// on every request, refresh on 401); rt itself when there is no OAuth.
func (u *Upstream) withOAuth(rt http.RoundTripper) http.RoundTripper {
	if u.oauth == nil {
		return rt
	}
	t := &oauth.Transport{Base: rt, Client: u.oauth}
	if login := u.opts.OAuthLogin; login != nil {
		t.Login = func(ctx context.Context, ch oauth.Challenge, scopes []string) error {
			return login(ctx, u.oauth, ch, scopes)
		}
	}
	return t
}

// maxIdlePerUpstream bounds the idle connections kept to one upstream host.
const maxIdlePerUpstream = 64

// limitTransport wraps each response body in a size limit.
type limitTransport struct {
	base       *h1.Transport
	max        int64
	onTooLarge func(error)
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	stream := mediaType == "text/event-stream"
	if stream {
		resp.Body = &eventLimitBody{rc: resp.Body, max: t.max + sseFieldSlack, lineEmpty: true, onTooLarge: t.onTooLarge}
	} else {
		resp.Body = &totalLimitBody{rc: resp.Body, max: t.max, onTooLarge: t.onTooLarge}
	}
	return resp, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach base.
func (t *limitTransport) CloseIdleConnections() { t.base.CloseIdleConnections() }

func tooLarge(limit int64) error {
	return fmt.Errorf("message exceeds max_message_bytes (%d bytes)", limit)
}

// totalLimitBody fails a body longer than max.
type totalLimitBody struct {
	rc         io.ReadCloser
	max, n     int64
	onTooLarge func(error)
	err        error
}

func (b *totalLimitBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		b.err = tooLarge(b.max)
		b.onTooLarge(b.err)
		return 0, b.err
	}
	return n, err
}

func (b *totalLimitBody) Close() error { return b.rc.Close() }

// eventLimitBody fails an event stream once one event (the bytes between two
// blank lines) is longer than max.
type eventLimitBody struct {
	rc         io.ReadCloser
	max        int64
	event      int64 // bytes of the current event
	lineEmpty  bool  // no byte other than '\r' since the last '\n'
	onTooLarge func(error)
	err        error
}

func (b *eventLimitBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	for _, c := range p[:n] {
		switch c {
		case '\n':
			if b.lineEmpty {
				b.event = 0 // blank line: the event ended
			}
			b.lineEmpty = true
		case '\r':
		default:
			b.lineEmpty = false
		}
		b.event++
	}
	if b.event > b.max {
		b.err = tooLarge(b.max - sseFieldSlack)
		b.onTooLarge(b.err)
		return 0, b.err
	}
	return n, err
}

func (b *eventLimitBody) Close() error { return b.rc.Close() }
