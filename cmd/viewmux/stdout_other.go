//go:build !unix

package main

import "os"

// takeStdout returns stdout. Without dup2 it cannot shield the protocol
// stream from stray writes; viewmux itself logs only to stderr.
func takeStdout() (*os.File, error) { return os.Stdout, nil }
