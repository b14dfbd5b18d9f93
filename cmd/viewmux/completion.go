package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// shells are the shells `viewmux completion` writes scripts for.
var shells = []string{"bash", "zsh", "fish"}

func cmdCompletion(args []string, stdout io.Writer) error {
	fs := newFlags("completion", stdout)
	if err := fs.parseAllowingArgs(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fs.usageErr(errors.New("want one shell: bash, zsh or fish"))
	}
	refs := commandRefs()
	switch fs.Arg(0) {
	case "bash":
		return bashCompletion(stdout, refs)
	case "zsh":
		return zshCompletion(stdout, refs)
	case "fish":
		return fishCompletion(stdout, refs)
	}
	return fs.usageErr(fmt.Errorf("unknown shell %q: want bash, zsh or fish", fs.Arg(0)))
}

// takesFile reports whether a flag's value is a path, for file completion.
func takesFile(arg string) bool { return arg == "FILE" }

// commandNames lists the commands completions offer.
func commandNames(refs []commandRef) []string {
	var names []string
	for _, r := range refs {
		names = append(names, r.name)
	}
	return names
}

// shellWord quotes s for a POSIX shell's single quotes.
func shellWord(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func bashCompletion(w io.Writer, refs []commandRef) error {
	var b strings.Builder
	b.WriteString("# bash completion for viewmux, made by `viewmux completion bash`.\n")
	b.WriteString("_viewmux() {\n")
	b.WriteString("    local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n")
	b.WriteString("    local cmd=\"\" i\n")
	b.WriteString("    for ((i = 1; i < COMP_CWORD; i++)); do\n")
	b.WriteString("        case \"${COMP_WORDS[i]}\" in -*) ;; *) cmd=\"${COMP_WORDS[i]}\"; break ;; esac\n")
	b.WriteString("    done\n")
	fmt.Fprintf(&b, "    local commands=%s\n", shellWord(strings.Join(commandNames(refs), " ")))
	b.WriteString("    local flags=\"\" files=\"\" words=\"\"\n")
	b.WriteString("    case \"$cmd\" in\n")
	for _, r := range refs {
		var flags, files []string
		for _, f := range r.flags {
			flags = append(flags, "--"+f.Name)
			if takesFile(flagArg(f)) {
				files = append(files, "--"+f.Name)
			}
		}
		words := ""
		switch r.name {
		case "help":
			words = strings.Join(commandNames(refs), " ")
		case "completion":
			words = strings.Join(shells, " ")
		case "pins":
			words = strings.Join(pinsSubcommands, " ")
		case "state":
			words = strings.Join(stateSubcommands, " ")
		case "auth":
			words = strings.Join(authSubcommands, " ")
		}
		fmt.Fprintf(&b, "        %s) flags=%s; files=%s; words=%s ;;\n", r.name,
			shellWord(strings.Join(flags, " ")), shellWord(strings.Join(files, " ")), shellWord(words))
	}
	// Bare `viewmux --flag` is serve.
	for _, r := range refs {
		if r.name == "serve" {
			var flags []string
			for _, f := range r.flags {
				flags = append(flags, "--"+f.Name)
			}
			fmt.Fprintf(&b, "        \"\") flags=%s; files='--config' ;;\n", shellWord(strings.Join(append(flags, "--help", "--version"), " ")))
		}
	}
	b.WriteString("    esac\n")
	b.WriteString("    if [[ \" $files \" == *\" $prev \"* ]]; then\n")
	b.WriteString("        COMPREPLY=($(compgen -f -- \"$cur\")); return\n")
	b.WriteString("    fi\n")
	b.WriteString("    if [[ -z \"$cmd\" && \"$cur\" != -* ]]; then\n")
	b.WriteString("        COMPREPLY=($(compgen -W \"$commands\" -- \"$cur\")); return\n")
	b.WriteString("    fi\n")
	b.WriteString("    if [[ \"$cur\" == -* ]]; then\n")
	b.WriteString("        COMPREPLY=($(compgen -W \"$flags --help\" -- \"$cur\")); return\n")
	b.WriteString("    fi\n")
	b.WriteString("    if [[ -n \"$words\" ]]; then\n")
	b.WriteString("        COMPREPLY=($(compgen -W \"$words\" -- \"$cur\")); return\n")
	b.WriteString("    fi\n")
	b.WriteString("    COMPREPLY=($(compgen -f -- \"$cur\"))\n")
	b.WriteString("}\n")
	b.WriteString("complete -o filenames -F _viewmux viewmux\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// zshQuote escapes s for a zsh _arguments or _describe spec inside single
// quotes: brackets and colons have meanings there.
func zshQuote(s string) string {
	s = strings.NewReplacer("'", `'\''`, "[", `\[`, "]", `\]`, ":", `\:`).Replace(s)
	return s
}

func zshCompletion(w io.Writer, refs []commandRef) error {
	var b strings.Builder
	b.WriteString("#compdef viewmux\n# zsh completion for viewmux, made by `viewmux completion zsh`.\n\n")
	b.WriteString("_viewmux() {\n    local -a commands\n    commands=(\n")
	for _, r := range refs {
		fmt.Fprintf(&b, "        '%s:%s'\n", r.name, zshQuote(r.summary))
	}
	b.WriteString("    )\n")
	b.WriteString("    if (( CURRENT == 2 )) && [[ $words[2] != -* ]]; then\n")
	b.WriteString("        _describe -t commands 'viewmux command' commands\n        return\n    fi\n")
	b.WriteString("    local cmd=$words[2]\n    [[ $cmd == -* ]] && cmd=serve\n")
	b.WriteString("    case $cmd in\n")
	for _, r := range refs {
		fmt.Fprintf(&b, "        %s)\n            _arguments -s \\\n", r.name)
		for _, f := range r.flags {
			spec := fmt.Sprintf("--%s[%s]", f.Name, zshQuote(flagUsage(f)))
			if arg := flagArg(f); arg != "" {
				action := " "
				if takesFile(arg) {
					action = "_files"
				}
				spec += ":" + strings.ToLower(arg) + ":" + action
			}
			fmt.Fprintf(&b, "                '%s' \\\n", spec)
		}
		b.WriteString("                '--help[show this command'\\''s help]'")
		switch r.name {
		case "help":
			b.WriteString(" \\\n                '1:command:(" + strings.Join(commandNames(refs), " ") + ")'")
		case "completion":
			b.WriteString(" \\\n                '1:shell:(" + strings.Join(shells, " ") + ")'")
		case "pins":
			b.WriteString(" \\\n                '1:subcommand:(" + strings.Join(pinsSubcommands, " ") + ")'")
		case "state":
			b.WriteString(" \\\n                '1:subcommand:(" + strings.Join(stateSubcommands, " ") + ")'")
		case "auth":
			b.WriteString(" \\\n                '1:subcommand:(" + strings.Join(authSubcommands, " ") + ")'")
		case "import":
			b.WriteString(" \\\n                '*:file:_files'")
		}
		b.WriteString("\n            ;;\n")
	}
	b.WriteString("    esac\n}\n\n")
	b.WriteString("if [[ $funcstack[1] == _viewmux ]]; then\n    _viewmux \"$@\"\nelse\n    compdef _viewmux viewmux\nfi\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote quotes s for fish's single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func fishCompletion(w io.Writer, refs []commandRef) error {
	var b strings.Builder
	b.WriteString("# fish completion for viewmux, made by `viewmux completion fish`.\n")
	b.WriteString("complete -c viewmux -f\n")
	for _, r := range refs {
		fmt.Fprintf(&b, "complete -c viewmux -n __fish_use_subcommand -a %s -d %s\n", r.name, fishQuote(r.summary))
	}
	for _, r := range refs {
		cond := "'__fish_seen_subcommand_from " + r.name + "'"
		for _, f := range r.flags {
			fmt.Fprintf(&b, "complete -c viewmux -n %s -l %s", cond, f.Name)
			if arg := flagArg(f); takesFile(arg) {
				b.WriteString(" -r -F")
			} else if arg != "" {
				b.WriteString(" -r")
			}
			fmt.Fprintf(&b, " -d %s\n", fishQuote(flagUsage(f)))
		}
		switch r.name {
		case "help":
			fmt.Fprintf(&b, "complete -c viewmux -n %s -a %s\n", cond, fishQuote(strings.Join(commandNames(refs), " ")))
		case "completion":
			fmt.Fprintf(&b, "complete -c viewmux -n %s -a %s\n", cond, fishQuote(strings.Join(shells, " ")))
		case "pins":
			fmt.Fprintf(&b, "complete -c viewmux -n %s -a %s\n", cond, fishQuote(strings.Join(pinsSubcommands, " ")))
		case "state":
			fmt.Fprintf(&b, "complete -c viewmux -n %s -a %s\n", cond, fishQuote(strings.Join(stateSubcommands, " ")))
		case "auth":
			fmt.Fprintf(&b, "complete -c viewmux -n %s -a %s\n", cond, fishQuote(strings.Join(authSubcommands, " ")))
		case "import":
			fmt.Fprintf(&b, "complete -c viewmux -n %s -F\n", cond)
		}
	}
	b.WriteString("complete -c viewmux -l help -d 'show help'\n")
	b.WriteString("complete -c viewmux -n __fish_use_subcommand -l version -d 'print the version'\n")
	_, err := io.WriteString(w, b.String())
	return err
}
