package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/grant"
)

// listener is one 2026-07-28 client's open subscriptions/listen stream on
// /mcp: it gets list_changed when its own view changes, and
// resources/updated for the URIs it listed.
type listener struct {
	binding grant.Binding
	want    mcp.SubscriptionFilter
	// queue hands a frame to the stream's writer without blocking; a full
	// writer drops it.
	queue  func(frame []byte) bool
	listed viewPrints // fingerprints of the view it last had
	uris   map[string]bool
	// close ends the stream: a reload whose config no longer grants what
	// it was opened with calls it (reload.go).
	close context.CancelFunc
}

// viewPrints are the fingerprints of what one view lists: its tools, its
// prompts, and its resources with templates.
type viewPrints struct{ tools, prompts, resources string }

// printsOf returns the fingerprints of b's view now.
func (s *Server) printsOf(b grant.Binding, view *filter.View) viewPrints {
	p, r := s.listing(b).Fingerprints()
	return viewPrints{tools: view.Fingerprint(), prompts: p, resources: r}
}

// listeners is the open listen streams of one Server.
type listeners struct {
	mu  sync.Mutex
	set map[*listener]bool
}

func (ls *listeners) add(l *listener) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.set == nil {
		ls.set = make(map[*listener]bool)
	}
	ls.set[l] = true
}

func (ls *listeners) remove(l *listener) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(ls.set, l)
}

// each calls fn for every open stream, under the lock (fn must not block).
func (ls *listeners) each(fn func(l *listener)) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for l := range ls.set {
		fn(l)
	}
}

func (l *listener) send(method string, params any) {
	frame, err := jsonrpc.Notification(method, params)
	if err != nil {
		return
	}
	l.queue(frame)
}

// serveListen answers a 2026-07-28 subscriptions/listen on /mcp with an
// event stream: the acknowledgement, then its view's list_changed and its
// subscribed resources' updates, until the client closes the request.
func (s *Server) serveListen(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, b grant.Binding, view *filter.View) {
	if e := validateModern(r, m, view); e != nil {
		writeAnswer(w, httpStatus(e.Code), jsonrpc.ErrorResponse(m.ID, e))
		return
	}
	// A listen stream holds a server.max_sessions slot while open.
	if err := s.takeSlot(b.Who); err != nil {
		s.refuseSession(w, m.ID, m.Method, b.Profile, err)
		return
	}
	defer s.giveSlot(b.Who)
	frames := make(chan []byte, callFrames)
	queue := func(f []byte) bool {
		select {
		case frames <- f:
			return true
		default:
			return false
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if !b.Expiry.IsZero() { // the stream ends with the access token it was opened with
		stopTimer := time.AfterFunc(time.Until(b.Expiry.Add(s.Resolver().ClockSkew())), cancel)
		defer stopTimer.Stop()
	}
	stop, e := s.listen(ctx, m, b, view, queue, cancel)
	if e != nil {
		writeAnswer(w, httpStatus(e.Code), jsonrpc.ErrorResponse(m.ID, e))
		return
	}
	defer stop()
	out := s.newEventWriter(w, nil)
	defer out.done()
	for {
		select {
		case f := <-frames:
			out.event(f)
			if out.broken {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// listenStream answers a 2026-07-28 subscriptions/listen on a stream door:
// the frames go through the session's writer until the request is
// cancelled or the session ends; then no answer is due.
func (s *Server) listenStream(ctx context.Context, sess *session, b grant.Binding, view *filter.View, m *jsonrpc.Message) []byte {
	queue := func(f []byte) bool { return sess.offer(jsonrpc.Whole(f)) }
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop, e := s.listen(ctx, m, b, view, queue, cancel)
	if e != nil {
		return jsonrpc.ErrorResponse(m.ID, e)
	}
	defer stop()
	<-ctx.Done()
	return nil
}

// listen opens a listen stream for m: it subscribes upstream to the
// resources m lists, registers the listener, and queues the
// acknowledgement. The returned func closes it all again; end ends the
// stream's request (ctx).
func (s *Server) listen(ctx context.Context, m *jsonrpc.Message, b grant.Binding, view *filter.View, queue func([]byte) bool, end context.CancelFunc) (func(), *jsonrpc.Error) {
	var p struct {
		Notifications mcp.SubscriptionFilter `json:"notifications"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "subscriptions/listen: " + err.Error()}
	}
	if len(p.Notifications.ResourceSubscriptions) > maxListenURIs {
		return nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("subscriptions/listen: at most %d resource subscriptions per stream", maxListenURIs)}
	}
	for _, uri := range p.Notifications.ResourceSubscriptions {
		if len(uri) > maxSubscriptionURI {
			return nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("subscriptions/listen: a subscribed URI may be at most %d bytes", maxSubscriptionURI)}
		}
	}
	l := &listener{binding: b, want: p.Notifications, queue: queue, listed: s.printsOf(b, view), uris: make(map[string]bool), close: end}
	var subscribed []string
	release := func() {
		for _, uri := range subscribed {
			if err := s.agg.Unsubscribe(context.WithoutCancel(ctx), "", uri); err != nil {
				s.log.Debug("resource subscription not released", "error", err)
			}
		}
	}
	for _, uri := range p.Notifications.ResourceSubscriptions {
		if l.uris[uri] {
			continue
		}
		if !s.shownURI(b, uri) {
			if _, _, routed := s.agg.RouteURI(uri); routed {
				// An upstream the view hides: answered as a URI nobody
				// serves, before anything is sent upstream.
				release()
				return nil, s.errorFor(m, fmt.Errorf("resource %q: %w", uri, aggregator.ErrResourceNotFound), true)
			}
		}
		if err := s.agg.Subscribe(ctx, "", "", uri); err != nil {
			release()
			return nil, s.errorFor(m, err, true)
		}
		subscribed = append(subscribed, uri)
		l.uris[uri] = true
	}
	s.listening.add(l)
	ack, _ := jsonrpc.Notification(string(mcp.MethodNotificationSubscriptionsAcknowledged), map[string]any{
		"_meta":         map[string]any{mcp.MetaKeySubscriptionID: m.ID},
		"notifications": p.Notifications,
	})
	queue(ack)
	return func() {
		s.listening.remove(l)
		release()
	}, nil
}

// maxListenURIs bounds the resource subscriptions of one listen stream.
const maxListenURIs = 1000

// notifyListeners tells each listen stream whose view changed (prints
// gives a binding's fingerprints now) the lists that changed, or, when uri
// is not "", each one subscribed to uri whose view shows the upstream
// serving it that uri was updated.
func (s *Server) notifyListeners(prints func(grant.Binding) viewPrints, uri string) {
	var up string
	var routed bool
	if uri != "" {
		up, _, routed = s.agg.RouteURI(uri)
	}
	s.listening.each(func(l *listener) {
		if uri != "" {
			if l.uris[uri] && routed && s.listing(l.binding).Shows(up) {
				l.send(string(mcp.MethodNotificationResourceUpdated), map[string]any{"uri": uri})
			}
			return
		}
		fp := prints(l.binding)
		if fp.tools != l.listed.tools && l.want.ToolsListChanged {
			l.send(string(mcp.MethodNotificationToolsListChanged), nil)
		}
		if fp.prompts != l.listed.prompts && l.want.PromptsListChanged {
			l.send(string(mcp.MethodNotificationPromptsListChanged), nil)
		}
		if fp.resources != l.listed.resources && l.want.ResourcesListChanged {
			l.send(string(mcp.MethodNotificationResourcesListChanged), nil)
		}
		l.listed = fp
	})
}
