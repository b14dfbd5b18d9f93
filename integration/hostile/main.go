// Command hostile is a stdio MCP server that attacks the gateway it is
// mounted in, for the tests of issue 17 (a hostile upstream is bounded, and
// speaks only for itself). It speaks raw JSON-RPC lines, so every byte it
// sends is the test's choice.
//
// Flags shape its catalog:
//
//	-tools N      lists N generated tools (t0 … tN-1) besides its own
//	-page N       N generated tools per tools/list page (0 = all in one)
//	-endless      every tools/list page has a new nextCursor, forever
//	-repeat       the second page's nextCursor is the first's again
//	-desc N       pads each generated tool's description to N bytes
//	-churn        every tools/list answer differs (a tool vN, N the
//	              number of tools/list requests so far)
//	-resource URI lists one resource, URI, and can subscribe to it
//	-starts PATH  appends one line to PATH at each start, so a test can
//	              count how often the gateway started it
//	-charges PATH appends one line to PATH for each vanish call read
//	-http ADDR    serves streamable HTTP on ADDR (POST /mcp) instead of
//	              stdio: each request is answered on an event stream of
//	              its own, which carries the notifications its call sends
//	              before its result
//
// Its own tools:
//
//	echo {text}            answers text
//	flood {count}          sends count tools/list_changed notifications
//	                       (0 = until stop; stdio only), as fast as they
//	                       are taken
//	chatter {count}        sends count notifications/message
//	progress {count}       sends count notifications/progress for the
//	                       call's own progressToken, then answers
//	spoof {uri}            sends notifications/resources/updated for uri
//	grow {count}           lists count generated tools from now on, and
//	                       says so with one tools/list_changed
//	stop                   ends a flood
//	stats                  answers "lists=<tools/list requests>"
//	vanish                 appends a line to the -charges file and exits
//	                       without answering: a crash after a side effect
//	                       (stdio only)
//	deep                   answers with a result nested 200,000 deep
//	big {count}            answers a text of count bytes
//	bigs                   answers how many big calls it has read
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

type server struct {
	tools           atomic.Int64 // generated tools listed
	page, desc      int
	endless, repeat bool
	churn           bool
	resource        string
	charges         string

	mu  sync.Mutex // serializes writes to out
	out *bufio.Writer

	lists    atomic.Int64
	bigs     atomic.Int64 // big calls read
	flooding atomic.Bool
}

func main() {
	s := &server{out: bufio.NewWriterSize(os.Stdout, 1<<16)}
	tools := flag.Int("tools", 0, "generated tools")
	flag.IntVar(&s.page, "page", 0, "generated tools per page (0 = one page)")
	flag.IntVar(&s.desc, "desc", 0, "description bytes per generated tool")
	flag.BoolVar(&s.endless, "endless", false, "a new cursor on every page, forever")
	flag.BoolVar(&s.repeat, "repeat", false, "the second page repeats the first cursor")
	flag.BoolVar(&s.churn, "churn", false, "every tools/list answer differs")
	flag.StringVar(&s.resource, "resource", "", "one resource URI to list")
	starts := flag.String("starts", "", "file to append a line to at each start")
	flag.StringVar(&s.charges, "charges", "", "file to append a line to for each vanish call")
	addr := flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	flag.Parse()
	s.tools.Store(int64(*tools))
	if *starts != "" {
		f, err := os.OpenFile(*starts, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			fmt.Fprintf(f, "%d\n", os.Getpid())
			f.Close()
		}
	}
	if *addr != "" {
		fmt.Fprintln(os.Stderr, http.ListenAndServe(*addr, http.HandlerFunc(s.serveHTTP)))
		os.Exit(1)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		var r request
		if json.Unmarshal(in.Bytes(), &r) != nil || len(r.ID) == 0 {
			continue // a notification, or garbage: nothing to answer
		}
		s.handle(r, s.send, true)
	}
}

// sink writes one message to the peer; it reports whether it could.
type sink func(msg any) bool

// raw is a message written as it is, whatever it holds: encoding/json
// would refuse one nested deeper than it reads.
type raw []byte

// encode returns msg's bytes.
func encode(msg any) []byte {
	if b, ok := msg.(raw); ok {
		return b
	}
	b, err := json.Marshal(msg)
	if err != nil {
		panic(err)
	}
	return b
}

// send writes one message to stdout as a line.
func (s *server) send(msg any) bool {
	b := encode(msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out.Write(b)
	s.out.WriteByte('\n')
	return s.out.Flush() == nil
}

// serveHTTP answers one POST: a request on an event stream of its own,
// anything else with 202.
func (s *server) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var r request
	if err := json.NewDecoder(req.Body).Decode(&r); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(r.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	s.handle(r, func(msg any) bool {
		if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", encode(msg)); err != nil {
			return false
		}
		if f != nil {
			f.Flush()
		}
		return true
	}, false)
}

func result(w sink, id json.RawMessage, res any) bool {
	return w(map[string]any{"jsonrpc": "2.0", "id": id, "result": res})
}

func notify(w sink, method string, params any) bool {
	return w(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

func text(t string) map[string]any {
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": t}}}
}

func tool(name string) map[string]any {
	return map[string]any{"name": name, "inputSchema": map[string]any{"type": "object"}}
}

// handle answers r on w; a tools/call runs on a goroutine of its own when
// async (stdio), so that stop can end a flood.
func (s *server) handle(r request, w sink, async bool) {
	switch r.Method {
	case "initialize":
		caps := map[string]any{"tools": map[string]any{"listChanged": true}}
		if s.resource != "" {
			caps["resources"] = map[string]any{"subscribe": true}
		}
		result(w, r.ID, map[string]any{
			"protocolVersion": "2025-11-25",
			"capabilities":    caps,
			"serverInfo":      map[string]any{"name": "hostile", "version": "1.0.0"},
		})
	case "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe":
		result(w, r.ID, map[string]any{})
	case "tools/list":
		s.lists.Add(1)
		result(w, r.ID, s.listPage(r.Params))
	case "resources/list":
		var rs []any
		if s.resource != "" {
			rs = append(rs, map[string]any{"uri": s.resource, "name": "owned"})
		}
		result(w, r.ID, map[string]any{"resources": rs})
	case "resources/templates/list":
		result(w, r.ID, map[string]any{"resourceTemplates": []any{}})
	case "resources/read":
		result(w, r.ID, map[string]any{"contents": []any{map[string]any{"uri": s.resource, "text": "owned"}}})
	case "tools/call":
		if async {
			go s.call(r, w)
		} else {
			s.call(r, w)
		}
	default:
		w(map[string]any{"jsonrpc": "2.0", "id": r.ID, "error": map[string]any{"code": -32601, "message": "no " + r.Method}})
	}
}

// listPage answers one tools/list request.
func (s *server) listPage(params json.RawMessage) map[string]any {
	var p struct {
		Cursor string `json:"cursor"`
	}
	json.Unmarshal(params, &p)
	start := 0
	fmt.Sscanf(p.Cursor, "c%d", &start)
	var items []any
	if start == 0 {
		for _, n := range []string{"echo", "flood", "chatter", "progress", "spoof", "grow", "stop", "stats", "vanish", "deep", "big", "bigs"} {
			items = append(items, tool(n))
		}
		if s.churn {
			items = append(items, tool(fmt.Sprintf("v%d", s.lists.Load())))
		}
	}
	total := int(s.tools.Load())
	end := total
	if s.page > 0 {
		end = min(start+s.page, total)
	}
	pad := strings.Repeat("x", s.desc)
	for i := start; i < end; i++ {
		t := tool(fmt.Sprintf("t%d", i))
		t["description"] = pad
		items = append(items, t)
	}
	res := map[string]any{"tools": items}
	switch {
	case s.endless:
		res["nextCursor"] = fmt.Sprintf("c%d", max(start, end)+1) // never ends, never repeats
	case s.repeat:
		res["nextCursor"] = "c1"
	case end < total:
		res["nextCursor"] = fmt.Sprintf("c%d", end)
	}
	return res
}

func (s *server) call(r request, w sink) {
	var p struct {
		Name      string `json:"name"`
		Arguments struct {
			Text  string `json:"text"`
			Count int    `json:"count"`
			URI   string `json:"uri"`
		} `json:"arguments"`
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	json.Unmarshal(r.Params, &p)
	a := p.Arguments
	switch p.Name {
	case "echo":
		result(w, r.ID, text(a.Text))
	case "flood":
		s.flooding.Store(true)
		result(w, r.ID, text("flooding"))
		for i := 0; (a.Count == 0 || i < a.Count) && s.flooding.Load(); i++ {
			if !notify(w, "notifications/tools/list_changed", map[string]any{}) {
				return
			}
		}
	case "chatter":
		for i := range a.Count {
			notify(w, "notifications/message", map[string]any{"level": "info", "logger": "hostile", "data": fmt.Sprintf("chatter %d", i)})
		}
		result(w, r.ID, text(fmt.Sprintf("sent %d", a.Count)))
	case "progress":
		for i := range a.Count {
			notify(w, "notifications/progress", map[string]any{"progressToken": p.Meta.ProgressToken, "progress": i + 1, "total": a.Count})
		}
		result(w, r.ID, text(fmt.Sprintf("sent %d", a.Count)))
	case "spoof":
		notify(w, "notifications/resources/updated", map[string]any{"uri": a.URI})
		result(w, r.ID, text("spoofed "+a.URI))
	case "grow":
		s.tools.Store(int64(a.Count))
		result(w, r.ID, text(fmt.Sprintf("grown to %d", a.Count)))
		notify(w, "notifications/tools/list_changed", map[string]any{})
	case "stop":
		s.flooding.Store(false)
		result(w, r.ID, text("stopped"))
	case "stats":
		result(w, r.ID, text(fmt.Sprintf("lists=%d", s.lists.Load())))
	case "vanish":
		if f, err := os.OpenFile(s.charges, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			fmt.Fprintln(f, "charge")
			f.Close()
		}
		os.Exit(3)
	case "big":
		s.bigs.Add(1)
		result(w, r.ID, text(strings.Repeat("x", a.Count)))
	case "bigs":
		result(w, r.ID, text(fmt.Sprint(s.bigs.Load())))
	case "deep":
		const depth = 200000
		w(raw(`{"jsonrpc":"2.0","id":` + string(r.ID) + `,"result":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`))
	default:
		w(map[string]any{"jsonrpc": "2.0", "id": r.ID, "error": map[string]any{"code": -32602, "message": "no tool " + p.Name}})
	}
}
