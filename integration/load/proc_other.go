//go:build !linux

package main

import "syscall"

// childAttr: outside Linux there is no parent-death signal; the deferred
// cleanup in run is what stops viewmux.
func childAttr() *syscall.SysProcAttr { return nil }
