package demo

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// resourceURIs lists the server's resources, sorted by URI, failing the test
// on a protocol error or a resource that is not a text/plain note.
func resourceURIs(t *testing.T, p *peer) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := p.ListResources(ctx, mcp.ListResourcesRequest{})
	if err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	var uris []string
	for _, r := range res.Resources {
		if r.MIMEType != "text/plain" {
			t.Errorf("resource %s has mimeType %q, want text/plain", r.URI, r.MIMEType)
		}
		uris = append(uris, r.URI)
	}
	slices.Sort(uris)
	return uris
}

// readResource reads uri and returns its single text content.
func readResource(t *testing.T, p *peer, uri string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := p.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: uri}})
	if err != nil {
		return "", err
	}
	if len(res.Contents) != 1 {
		t.Fatalf("resources/read %s: %d contents, want 1", uri, len(res.Contents))
	}
	tc, ok := res.Contents[0].(mcp.TextResourceContents)
	if !ok {
		t.Fatalf("resources/read %s: content %T, want text", uri, res.Contents[0])
	}
	if tc.URI != uri || tc.MIMEType != "text/plain" {
		t.Errorf("resources/read %s: uri %q mimeType %q", uri, tc.URI, tc.MIMEType)
	}
	return tc.Text, nil
}

func TestResources(t *testing.T) {
	const listChanged = "notifications/resources/list_changed"
	for _, mode := range protocolModes {
		t.Run(mode.name, func(t *testing.T) {
			p := startPipe(t, "res", mode.modern, mode.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()

			if got, want := resourceURIs(t, p), []string{"note://res/welcome"}; !slices.Equal(got, want) {
				t.Errorf("resources = %v, want %v", got, want)
			}
			templates, err := p.ListResourceTemplates(ctx, mcp.ListResourceTemplatesRequest{})
			if err != nil {
				t.Fatalf("resources/templates/list: %v", err)
			}
			if len(templates.ResourceTemplates) != 1 ||
				templates.ResourceTemplates[0].URITemplate.Raw() != "note://res/{title}" ||
				templates.ResourceTemplates[0].MIMEType != "text/plain" {
				t.Errorf("templates = %+v, want one note://res/{title} (text/plain)", templates.ResourceTemplates)
			}

			// A new note is a new resource, announced with list_changed.
			p.callTool(t, "write_note", map[string]any{"title": "shopping list", "text": "eggs"})
			p.rec.waitFor(t, 1, isMethod(listChanged))
			want := []string{"note://res/shopping%20list", "note://res/welcome"}
			if got := resourceURIs(t, p); !slices.Equal(got, want) {
				t.Errorf("resources after write = %v, want %v", got, want)
			}
			// Overwriting changes the text but not the list.
			p.callTool(t, "write_note", map[string]any{"title": "shopping list", "text": "bread"})
			p.flush(t)
			if n := len(p.rec.matching(isMethod(listChanged))); n != 1 {
				t.Errorf("%d resources/list_changed after an overwrite, want still 1", n)
			}

			reads := []struct {
				name    string
				uri     string
				want    string
				wantErr string
			}{
				{name: "listed note", uri: "note://res/shopping%20list", want: "bread"},
				{name: "seed note", uri: "note://res/welcome", want: welcomeText},
				// Not a listed URI, so only the template matches it.
				{name: "template", uri: "note://res/%77elcome", want: welcomeText},
				{name: "template unknown note", uri: "note://res/missing", wantErr: `note "missing"`},
				{name: "other server", uri: "note://other/welcome", wantErr: "not found"},
			}
			for _, rd := range reads {
				t.Run(rd.name, func(t *testing.T) {
					got, err := readResource(t, p, rd.uri)
					switch {
					case rd.wantErr != "" && (err == nil || !strings.Contains(err.Error(), rd.wantErr)):
						t.Errorf("read %s = %q, %v; want error containing %q", rd.uri, got, err, rd.wantErr)
					case rd.wantErr == "" && err != nil:
						t.Errorf("read %s: %v", rd.uri, err)
					case rd.wantErr == "" && got != rd.want:
						t.Errorf("read %s = %q, want %q", rd.uri, got, rd.want)
					}
				})
			}

			// Deleting the note removes its resource, announced again.
			p.callTool(t, "delete_note", map[string]any{"title": "shopping list"})
			p.rec.waitFor(t, 2, isMethod(listChanged))
			if got, want := resourceURIs(t, p), []string{"note://res/welcome"}; !slices.Equal(got, want) {
				t.Errorf("resources after delete = %v, want %v", got, want)
			}
			if _, err := readResource(t, p, "note://res/shopping%20list"); err == nil {
				t.Errorf("read of a deleted note succeeded")
			}
		})
	}
}

func TestSummarizeNotesPrompt(t *testing.T) {
	p := startPipe(t, "prompt", true)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	list, err := p.ListPrompts(ctx, mcp.ListPromptsRequest{})
	if err != nil {
		t.Fatalf("prompts/list: %v", err)
	}
	if len(list.Prompts) != 1 || list.Prompts[0].Name != "summarize_notes" ||
		len(list.Prompts[0].Arguments) != 1 || list.Prompts[0].Arguments[0].Name != "style" ||
		list.Prompts[0].Arguments[0].Required {
		t.Fatalf("prompts = %+v, want summarize_notes with an optional style", list.Prompts)
	}
	p.callTool(t, "write_note", map[string]any{"title": "todo", "text": "water the plants"})

	tests := []struct {
		name      string
		args      map[string]string
		wantStyle string
	}{
		{name: "default style", wantStyle: "in a brief style"},
		{name: "given style", args: map[string]string{"style": "detailed"}, wantStyle: "in a detailed style"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := p.GetPrompt(ctx, mcp.GetPromptRequest{Params: mcp.GetPromptParams{
				Name: "summarize_notes", Arguments: tt.args,
			}})
			if err != nil {
				t.Fatalf("prompts/get: %v", err)
			}
			if len(res.Messages) != 1 || res.Messages[0].Role != mcp.RoleUser {
				t.Fatalf("messages = %+v, want one user message", res.Messages)
			}
			tc, ok := res.Messages[0].Content.(mcp.TextContent)
			if !ok {
				t.Fatalf("content %T, want text", res.Messages[0].Content)
			}
			for _, want := range []string{tt.wantStyle, "2 notes", "## todo\nwater the plants", "## welcome\n" + welcomeText} {
				if !strings.Contains(tc.Text, want) {
					t.Errorf("prompt text lacks %q:\n%s", want, tc.Text)
				}
			}
		})
	}
}
