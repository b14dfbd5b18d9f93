package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// requireTool returns the path of a tool a test needs. Without it the test
// skips, unless CI=true, where it fails: CI never passes by running nothing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s is not installed (.ci/run installs it)", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return path
}

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out bytes.Buffer
	if err := cmdCompletion([]string{shell}, &out); err != nil {
		t.Fatalf("completion %s: %v", shell, err)
	}
	return out.String()
}

// TestCompletionsNameEveryCommandAndFlag: the scripts come from the command
// table and each command's own flag set, so every listed command and flag
// is in each, and the hidden ones are not.
func TestCompletionsNameEveryCommandAndFlag(t *testing.T) {
	refs := commandRefs()
	if len(refs) < 8 {
		t.Fatalf("commandRefs found %d commands", len(refs))
	}
	nflags := 0
	for _, shell := range shells {
		script := completionScript(t, shell)
		for _, r := range refs {
			if !strings.Contains(script, r.name) {
				t.Errorf("%s: command %s missing", shell, r.name)
			}
			for _, f := range r.flags {
				nflags++
				want := "--" + f.Name
				if shell == "fish" {
					want = "-l " + f.Name
				}
				if !strings.Contains(script, want) {
					t.Errorf("%s: flag --%s of %s missing", shell, f.Name, r.name)
				}
			}
		}
		for _, hidden := range []string{"demo-server"} {
			if strings.Contains(script, hidden) {
				t.Errorf("%s: hidden command %s offered", shell, hidden)
			}
		}
	}
	if nflags < 15 {
		t.Errorf("only %d flags found across the shells: are the flag sets captured?", nflags)
	}
}

// TestCompletionBash runs the bash script's function in a real bash.
func TestCompletionBash(t *testing.T) {
	bash := requireTool(t, "bash")
	script := filepath.Join(t.TempDir(), "viewmux.bash")
	if err := os.WriteFile(script, []byte(completionScript(t, "bash")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		words string // the command line; the last word is the one completed
		want  string // one of the completions
	}{
		{"viewmux ch", "check"},
		{"viewmux ", "completion"},
		{"viewmux tools --re", "--read-only"},
		{"viewmux check --no", "--no-connect"},
		{"viewmux serve --st", "--stdio"},
		{"viewmux --li", "--listen"},
		{"viewmux completion ", "zsh"},
		{"viewmux pins ap", "approve"},
		{"viewmux pins approve --up", "--upstream"},
		{"viewmux help im", "import"},
		{"viewmux init --out", "--output"},
	} {
		words := strings.Split(tt.words, " ")
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, shellWord(w))
		}
		prog := "source " + shellWord(script) + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\n" +
			"COMP_CWORD=" + strings.TrimSpace(string(rune('0'+len(words)-1))) + "\n_viewmux\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: bash: %v\n%s", tt.words, err, out)
		}
		got := strings.Fields(string(out))
		found := false
		for _, g := range got {
			found = found || g == tt.want
		}
		if !found {
			t.Errorf("completing %q: got %v, want %s among them", tt.words, got, tt.want)
		}
	}
}

// TestCompletionZsh loads the zsh script and checks its syntax.
func TestCompletionZsh(t *testing.T) {
	zsh := requireTool(t, "zsh")
	script := filepath.Join(t.TempDir(), "_viewmux")
	if err := os.WriteFile(script, []byte(completionScript(t, "zsh")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(zsh, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	// Sourced after compinit, it registers itself for viewmux.
	prog := "autoload -U compinit && compinit -u -D && source " + shellWord(script) + " && print -r -- ${_comps[viewmux]}"
	out, err := exec.Command(zsh, "-f", "-c", prog).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "_viewmux" {
		t.Errorf("zsh: sourcing the script did not register _viewmux for viewmux: %v\n%s", err, out)
	}
}

// TestCompletionFish asks a real fish for completions.
func TestCompletionFish(t *testing.T) {
	fish := requireTool(t, "fish")
	script := filepath.Join(t.TempDir(), "viewmux.fish")
	if err := os.WriteFile(script, []byte(completionScript(t, "fish")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ line, want string }{
		{"viewmux ch", "check"},
		{"viewmux tools --re", "--read-only"},
		{"viewmux completion ", "fish"},
	} {
		out, err := exec.Command(fish, "--no-config", "-c", "source "+shellWord(script)+"; complete -C "+shellWord(tt.line)).CombinedOutput()
		if err != nil {
			t.Fatalf("fish: %v\n%s", err, out)
		}
		found := false
		for _, l := range strings.Split(string(out), "\n") {
			first, _, _ := strings.Cut(l, "\t")
			found = found || first == tt.want
		}
		if !found {
			t.Errorf("fish completing %q: got\n%s\nwant %s", tt.line, out, tt.want)
		}
	}
}

// TestManPage: the man page names every command and flag, and groff
// formats it without a warning.
func TestManPage(t *testing.T) {
	var out bytes.Buffer
	if err := cmdMan(nil, &out); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	for _, r := range commandRefs() {
		if !strings.Contains(page, ".SS "+r.name+"\n") {
			t.Errorf("the man page has no section for %s", r.name)
		}
		for _, f := range r.flags {
			if !strings.Contains(page, roffFlag(f.Name)) {
				t.Errorf("the man page lacks --%s of %s", f.Name, r.name)
			}
		}
	}
	if strings.Contains(page, "demo-server") {
		t.Error("the man page lists the hidden demo-server")
	}
	groff := requireTool(t, "groff")
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if msgs, err := cmd.CombinedOutput(); err != nil || len(msgs) > 0 {
		t.Errorf("groff -ww: %v\n%s", err, msgs)
	}
}
