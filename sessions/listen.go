package sessions

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/filter"
	"github.com/mcpmux/mcpmux/internal/jsonrpc"
)

// listener is one 2026-07-28 client's open subscriptions/listen stream on
// /mcp: it gets list_changed when its own view changes, and
// resources/updated for the URIs it listed.
type listener struct {
	binding Binding
	want    mcp.SubscriptionFilter
	frames  chan []byte // to the stream's writer; full = dropped
	listed  string      // fingerprint of the view it last had
	uris    map[string]bool
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
	select {
	case l.frames <- frame:
	default:
	}
}

// serveListen answers a 2026-07-28 subscriptions/listen on /mcp with an
// event stream: the acknowledgement, then its view's list_changed and its
// subscribed resources' updates, until the client closes the request.
func (s *Server) serveListen(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, b Binding, view *filter.View) {
	if e := validateModern(r, m, view); e != nil {
		writeAnswer(w, httpStatus(e.Code), jsonrpc.ErrorResponse(m.ID, e))
		return
	}
	var p struct {
		Notifications mcp.SubscriptionFilter `json:"notifications"`
	}
	json.Unmarshal(m.Params, &p)
	l := &listener{binding: b, want: p.Notifications, frames: make(chan []byte, callFrames), listed: view.Fingerprint(), uris: make(map[string]bool)}
	ctx := r.Context()
	var subscribed []string
	defer func() {
		for _, uri := range subscribed {
			s.agg.Unsubscribe(context.WithoutCancel(ctx), uri)
		}
	}()
	for _, uri := range p.Notifications.ResourceSubscriptions {
		if err := s.agg.Subscribe(ctx, uri); err != nil {
			if e := s.errorFor(m, err, true); e != nil {
				writeAnswer(w, httpStatus(e.Code), jsonrpc.ErrorResponse(m.ID, e))
			}
			return
		}
		subscribed = append(subscribed, uri)
		l.uris[uri] = true
	}
	s.listening.add(l)
	defer s.listening.remove(l)
	out := &eventWriter{w: w}
	ack, _ := jsonrpc.Notification(string(mcp.MethodNotificationSubscriptionsAcknowledged), map[string]any{
		"_meta":         map[string]any{mcp.MetaKeySubscriptionID: m.ID},
		"notifications": p.Notifications,
	})
	out.event(ack)
	for {
		select {
		case f := <-l.frames:
			out.event(f)
			if out.broken {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// notifyListeners tells each listen stream whose view changed, and each
// one subscribed to uri (when uri is not "").
func (s *Server) notifyListeners(fingerprint func(Binding) string, promptsChanged, resourcesChanged bool, uri string) {
	s.listening.each(func(l *listener) {
		if uri != "" {
			if l.uris[uri] {
				l.send(string(mcp.MethodNotificationResourceUpdated), map[string]any{"uri": uri})
			}
			return
		}
		if fp := fingerprint(l.binding); fp != l.listed {
			l.listed = fp
			if l.want.ToolsListChanged {
				l.send(string(mcp.MethodNotificationToolsListChanged), nil)
			}
		}
		if promptsChanged && l.want.PromptsListChanged {
			l.send(string(mcp.MethodNotificationPromptsListChanged), nil)
		}
		if resourcesChanged && l.want.ResourcesListChanged {
			l.send(string(mcp.MethodNotificationResourcesListChanged), nil)
		}
	})
}
