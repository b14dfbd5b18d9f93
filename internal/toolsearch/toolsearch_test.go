package toolsearch

import (
	"fmt"
	"slices"
	"testing"
)

func TestWords(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"read_text_file", "read text file"},
		{"gh__get-issue", "gh get issue"},
		{"readMultipleFiles", "read multiple files"},
		{"HTTPServer", "http server"},
		{"getTinyImage", "get tiny image"},
		{"utf8Decode", "utf 8 decode"},
		{"Größe ändern", "größe ändern"},
		{"  ", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got := fmt.Sprint(Words(tc.in))
			if want := fmt.Sprint(splitSpace(tc.want)); got != want {
				t.Errorf("Words(%q) = %s, want %s", tc.in, got, want)
			}
		})
	}
}

func splitSpace(s string) []string {
	var out []string
	cur := ""
	for _, r := range s + " " {
		if r == ' ' {
			if cur != "" {
				out = append(out, cur)
			}
			cur = ""
			continue
		}
		cur += string(r)
	}
	return out
}

func TestStemMeets(t *testing.T) {
	// Each group's words must stem alike, and unlike the next group's.
	groups := [][]string{
		{"file", "files"},
		{"directory", "directories"},
		{"list", "lists", "listed", "listing"},
		{"write", "writes", "writing"},
		{"delete", "deleted", "deletes", "deleting"},
		{"move", "moves", "moving", "moved"},
		{"match", "matches"},
		{"get", "gets", "getting"},
		{"add", "adds", "adding", "added"},
		{"string", "strings"},
		{"status"},
		{"echo", "echoes"},
		{"create", "creates", "created", "creating"},
		{"entity", "entities"},
	}
	seen := map[string]int{}
	for gi, g := range groups {
		stem := Stem(g[0])
		for _, w := range g[1:] {
			if s := Stem(w); s != stem {
				t.Errorf("Stem(%q) = %q, Stem(%q) = %q: want equal", w, s, g[0], stem)
			}
		}
		if other, ok := seen[stem]; ok {
			t.Errorf("groups %v and %v share stem %q", groups[other], g, stem)
		}
		seen[stem] = gi
	}
}

func TestTermsDropsStopWords(t *testing.T) {
	got := Terms("How do I read the contents of a file?")
	if want := []string{"read", "content", "file"}; !slices.Equal(got, want) {
		t.Errorf("Terms = %v, want %v", got, want)
	}
	// Single letters go too; digits stay.
	got = Terms("mkdir -p a/b/c 2 + 2")
	if want := []string{"mkdir", "2", "2"}; !slices.Equal(got, want) {
		t.Errorf("Terms = %v, want %v", got, want)
	}
}

func docs() []Doc {
	return []Doc{
		{Name: "fs__read_text_file", Description: "Read the complete contents of a file as text.", Args: []Arg{{"path", "Path of the file"}}, Upstream: "fs"},
		{Name: "fs__write_file", Description: "Create a new file or overwrite an existing one.", Args: []Arg{{"path", ""}, {"content", ""}}, Upstream: "fs"},
		{Name: "fs__list_directory", Description: "List the files and directories in a directory.", Upstream: "fs"},
		{Name: "memory__create_entities", Title: "Create entities", Description: "Create multiple new entities in the knowledge graph.", Upstream: "memory"},
		{Name: "every__echo", Description: "Echoes back the input.", Args: []Arg{{"message", "Message to echo"}}, Upstream: "every"},
		{Name: "every__getTinyImage", Description: "Returns the MCP_TINY_IMAGE.", Upstream: "every"},
	}
}

func TestSearch(t *testing.T) {
	ix := New(docs())
	for _, tc := range []struct {
		query string
		top   string
	}{
		{"read a file", "fs__read_text_file"},
		{"what's in this folder directory listing", "fs__list_directory"},
		{"write some content into a new file", "fs__write_file"},
		{"add entities to the knowledge graph", "memory__create_entities"},
		{"echo my message back", "every__echo"},
		{"tiny image", "every__getTinyImage"},
		{"memory", "memory__create_entities"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			hits := ix.Search(tc.query, 3)
			if len(hits) == 0 || docs()[hits[0].Doc].Name != tc.top {
				t.Fatalf("Search(%q) = %v, want %s first", tc.query, names(hits), tc.top)
			}
			for i := 1; i < len(hits); i++ {
				if hits[i].Score > hits[i-1].Score {
					t.Errorf("hits out of order: %v", hits)
				}
			}
		})
	}
}

func names(hits []Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, docs()[h.Doc].Name)
	}
	return out
}

func TestSearchBounds(t *testing.T) {
	ix := New(docs())
	if hits := ix.Search("file", 2); len(hits) != 2 {
		t.Errorf("limit 2: %d hits", len(hits))
	}
	for _, q := range []string{"", "the of a", "zzzz", "!!!"} {
		if hits := ix.Search(q, 5); len(hits) != 0 {
			t.Errorf("Search(%q) = %v, want nothing", q, hits)
		}
	}
	if hits := ix.Search("file", 0); hits != nil {
		t.Errorf("limit 0: %v", hits)
	}
	if hits := New(nil).Search("file", 5); hits != nil {
		t.Errorf("empty index: %v", hits)
	}
	// Ties go to the earlier document, so results are stable.
	same := New([]Doc{{Name: "y_tool"}, {Name: "x_tool"}, {Name: "z_tool"}})
	if hits := same.Search("tool", 3); len(hits) != 3 || hits[0].Doc != 0 || hits[1].Doc != 1 || hits[2].Doc != 2 {
		t.Errorf("ties: %v", hits)
	}
}

// TestStemPorter checks Stem against examples from Porter's paper.
func TestStemPorter(t *testing.T) {
	for in, want := range map[string]string{
		"caresses": "caress", "ponies": "poni", "cats": "cat", "agreed": "agre",
		"plastered": "plaster", "motoring": "motor", "sing": "sing",
		"conflated": "conflat", "troubled": "troubl", "sized": "size",
		"hopping": "hop", "falling": "fall", "filing": "file", "failing": "fail",
		"happy": "happi", "sky": "sky", "relational": "relat", "conditional": "condit",
		"valenci": "valenc", "digitizer": "digit", "vietnamization": "vietnam",
		"operator": "oper", "hopefulness": "hope", "formaliti": "formal",
		"triplicate": "triplic", "formative": "form", "electrical": "electr",
		"goodness": "good", "revival": "reviv", "allowance": "allow",
		"adjustment": "adjust", "adoption": "adopt", "homologou": "homolog",
		"probate": "probat", "rate": "rate", "cease": "ceas", "controll": "control",
		"roll": "roll", "generalizations": "gener", "directories": "directori",
		"utf8": "utf8", "größe": "größe",
	} {
		if got := Stem(in); got != want {
			t.Errorf("Stem(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestQueryExpansion: a query finds a tool through a partial word and
// through the thesaurus, and a word it spells out outranks either.
func TestQueryExpansion(t *testing.T) {
	docs := []Doc{
		{Name: "x__print_environment", Description: "Print the variables."},
		{Name: "x__delete_file", Description: "Delete a file."},
		{Name: "x__list_directory", Description: "List a directory."},
		{Name: "x__env_check", Description: "Check something."},
	}
	ix := New(docs)
	for _, tc := range []struct{ query, top string }{
		{"environ", "x__print_environment"}, // a prefix of the term
		{"rm notes.txt", "x__delete_file"},  // thesaurus: rm, delete
		{"ls", "x__list_directory"},         // thesaurus: ls, list
		{"env", "x__env_check"},             // spelled out beats completed
	} {
		hits := ix.Search(tc.query, 4)
		if len(hits) == 0 || docs[hits[0].Doc].Name != tc.top {
			var got []string
			for _, h := range hits {
				got = append(got, docs[h.Doc].Name)
			}
			t.Errorf("Search(%q) = %v, want %s first", tc.query, got, tc.top)
		}
	}
	if hits := ix.Search("env", 4); len(hits) < 2 || docs[hits[1].Doc].Name != "x__print_environment" {
		t.Errorf(`Search("env") does not find x__print_environment second: %v`, hits)
	}
}

// TestRelevanceFeedback: the best match's telling terms join the query,
// so a tool that shares them but no word of the query is found after it.
func TestRelevanceFeedback(t *testing.T) {
	docs := []Doc{
		{Name: "a__zorble", Description: "Frobnicate the quux.", Upstream: "a"},
		{Name: "b__quux_tool", Description: "Quux handling.", Upstream: "b"},
		{Name: "c__weather", Description: "Forecast for a city.", Upstream: "c"},
		{Name: "d__clock", Description: "Tell the time.", Upstream: "d"},
		{Name: "e__dice", Description: "Roll a die.", Upstream: "e"},
	}
	hits := New(docs).Search("zorble", 3)
	if len(hits) != 2 || hits[0].Doc != 0 || hits[1].Doc != 1 {
		t.Errorf(`Search("zorble") = %v, want a__zorble then b__quux_tool`, hits)
	}
}
