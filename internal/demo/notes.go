package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// maxTitleBytes bounds a note title, which also becomes part of a URI.
const maxTitleBytes = 256

// welcomeTitle and welcomeText are the note every demo server starts with.
const (
	welcomeTitle = "welcome"
	welcomeText  = "This is an viewmux demo server. It keeps notes in memory: " +
		"list them with list_notes, read one with read_note, change them with " +
		"write_note and delete_note, or read them as note:// resources. " +
		"slow_count reports progress and can be cancelled; add_tool registers " +
		"a new tool at run time. Nothing is saved when the server stops."
)

// instructions is what the demo server tells clients about itself.
const instructions = "A demo MCP server built into viewmux. It stores short text notes in " +
	"memory (tools list_notes, read_note, write_note, delete_note; resources " +
	"note://<server>/<title>; prompt summarize_notes). slow_count counts with " +
	"progress notifications and honours cancellation, add_tool registers a new " +
	"echo tool at run time and announces it with tools/list_changed, and echo " +
	"returns its text unchanged. Notes are lost when the server stops."

// demo is one demo server: its note store and the mcp-go server exposing it.
// Its methods are safe for concurrent use.
type demo struct {
	name string
	srv  *server.MCPServer
	log  *slog.Logger

	// mu guards notes, and is held while the matching note resource is added
	// to or removed from srv, so that resources/list never disagrees with
	// the store. mcp-go never calls back into demo while holding its own
	// locks, and its notification sends do not block, so this cannot
	// deadlock.
	mu    sync.Mutex
	notes map[string]string // title → text

	// addMu serialises add_tool's check for an existing name with the
	// registration, so two concurrent calls cannot both add one name.
	addMu sync.Mutex
	added int // tools registered by add_tool; guarded by addMu
}

// newDemo builds a demo server named name, which must match namePattern. A
// nil logger discards.
func newDemo(name string, logger *slog.Logger) *demo {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &demo{
		name:  name,
		log:   logger,
		notes: make(map[string]string),
	}
	d.srv = server.NewMCPServer(
		"viewmux-demo-"+name,
		serverVersion,
		server.WithInstructions(instructions),
		server.WithToolCapabilities(true),
		server.WithResourceCapabilities(false, true),
		server.WithPromptCapabilities(true),
		server.WithLogging(),
		server.WithRecovery(),
	)
	d.addTools()
	d.srv.AddResourceTemplate(
		mcp.NewResourceTemplate(
			"note://"+name+"/{title}",
			"note",
			mcp.WithTemplateDescription("Any note of this demo server, by its title (percent-encoded)."),
			mcp.WithTemplateMIMEType("text/plain"),
		),
		d.readNoteResource,
	)
	d.srv.AddPrompt(
		mcp.NewPrompt("summarize_notes",
			mcp.WithPromptDescription("Ask the model to summarize every note in the demo store."),
			mcp.WithArgument("style",
				mcp.ArgumentDescription(`How to summarize, e.g. "brief" or "detailed" (default "brief").`),
			),
		),
		d.summarizeNotes,
	)
	d.putNote(welcomeTitle, welcomeText)
	return d
}

// noteURI returns the resource URI of the note titled title.
func (d *demo) noteURI(title string) string {
	return "note://" + d.name + "/" + url.PathEscape(title)
}

// titleFromURI returns the note title a note URI of this server names.
func (d *demo) titleFromURI(uri string) (string, error) {
	escaped, ok := strings.CutPrefix(uri, "note://"+d.name+"/")
	if !ok || escaped == "" {
		return "", fmt.Errorf("uri %q is not a note of demo server %q", uri, d.name)
	}
	title, err := url.PathUnescape(escaped)
	if err != nil {
		return "", fmt.Errorf("uri %q: %w", uri, err)
	}
	return title, nil
}

// checkTitle reports why title cannot name a note, or nil if it can.
func checkTitle(title string) error {
	switch {
	case title == "":
		return fmt.Errorf("title must not be empty")
	case len(title) > maxTitleBytes:
		return fmt.Errorf("title is %d bytes, more than %d", len(title), maxTitleBytes)
	}
	return nil
}

// putNote stores text under title and reports whether the note is new. A new
// note is also registered as a resource, which makes mcp-go send
// notifications/resources/list_changed.
func (d *demo) putNote(title, text string) (created bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, exists := d.notes[title]
	d.notes[title] = text
	if !exists {
		d.srv.AddResource(
			mcp.NewResource(d.noteURI(title), title,
				mcp.WithResourceDescription("The demo note "+strconv.Quote(title)+"."),
				mcp.WithMIMEType("text/plain"),
			),
			d.readNoteResource,
		)
	}
	return !exists
}

// getNote returns the text of the note titled title.
func (d *demo) getNote(title string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	text, ok := d.notes[title]
	return text, ok
}

// deleteNote removes the note titled title and its resource, and reports
// whether it existed.
func (d *demo) deleteNote(title string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.notes[title]; !ok {
		return false
	}
	delete(d.notes, title)
	d.srv.DeleteResources(d.noteURI(title))
	return true
}

// snapshot returns the notes' titles in sorted order and a copy of the store.
// The caller owns both.
func (d *demo) snapshot() ([]string, map[string]string) {
	d.mu.Lock()
	notes := make(map[string]string, len(d.notes))
	for title, text := range d.notes {
		notes[title] = text
	}
	d.mu.Unlock()
	titles := make([]string, 0, len(notes))
	for title := range notes {
		titles = append(titles, title)
	}
	slices.Sort(titles)
	return titles, notes
}

// readNoteResource serves resources/read for a note resource and for the
// note template alike: the title is taken from the URI itself.
func (d *demo) readNoteResource(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	uri := req.Params.URI
	title, err := d.titleFromURI(uri)
	if err != nil {
		return nil, err
	}
	text, ok := d.getNote(title)
	if !ok {
		return nil, fmt.Errorf("note %q: %w", title, server.ErrResourceNotFound)
	}
	return []mcp.ResourceContents{
		mcp.TextResourceContents{URI: uri, MIMEType: "text/plain", Text: text},
	}, nil
}

// summarizeNotes serves prompts/get for summarize_notes.
func (d *demo) summarizeNotes(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	style := req.Params.Arguments["style"]
	if style == "" {
		style = "brief"
	}
	titles, notes := d.snapshot()
	var b strings.Builder
	fmt.Fprintf(&b, "Summarize the following %d notes in a %s style.\n", len(titles), style)
	for _, title := range titles {
		fmt.Fprintf(&b, "\n## %s\n%s\n", title, notes[title])
	}
	return mcp.NewGetPromptResult(
		"Summarize the demo notes",
		[]mcp.PromptMessage{mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent(b.String()))},
	), nil
}
