package main

import (
	"context"
	"flag"
	"io"
)

// commandRef is what completions and the man page say about one command:
// its table entry and its flags, read from the command itself.
type commandRef struct {
	command
	flags []*flag.Flag // in the order help lists them; nil when it has none
	help  string       // the text of `viewmux NAME --help`
}

// helpCapture is the writer commandRefs hands a command's --help: flags.help
// records the flag set in it as well as writing the text, so the flags come
// from the command's own definition, not from a second list.
type helpCapture struct {
	text []byte
	fs   *flag.FlagSet
}

func (h *helpCapture) Write(p []byte) (int, error) {
	h.text = append(h.text, p...)
	return len(p), nil
}

// commandRefs returns every command help lists, in its order, with its
// flags. It runs each command with --help, which parses flags and returns
// before the command does anything.
func commandRefs() []commandRef {
	var refs []commandRef
	for _, c := range commands() {
		if c.hidden {
			continue
		}
		h := &helpCapture{}
		_ = c.run(context.Background(), []string{"--help"}, h, io.Discard) // flag.ErrHelp: help was written
		ref := commandRef{command: c, help: string(h.text)}
		if h.fs != nil {
			h.fs.VisitAll(func(f *flag.Flag) { ref.flags = append(ref.flags, f) })
		}
		refs = append(refs, ref)
	}
	return refs
}

// flagArg is the name of a flag's value as help shows it (FILE, ADDR), or ""
// for a boolean flag.
func flagArg(f *flag.Flag) string {
	arg, _ := flag.UnquoteUsage(f)
	return arg
}

// flagUsage is a flag's one-line description as help shows it.
func flagUsage(f *flag.Flag) string {
	_, usage := flag.UnquoteUsage(f)
	return usage
}
