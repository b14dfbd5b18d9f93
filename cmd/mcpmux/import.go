package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mcpmux/mcpmux/configs"
)

func cmdImport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("import", stdout)
	if err := fs.parseAllowingArgs(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fs.usageErr(fmt.Errorf("want exactly one FILE, got %d arguments", fs.NArg()))
	}
	data, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("import: %w", err)}
	}
	out, err := configs.Import(data)
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("import %s: %w", fs.Arg(0), err)}
	}
	_, err = stdout.Write(out)
	return err
}
