package main

import (
	"context"
	"path/filepath"

	"github.com/viewmux/viewmux/integration/internal/gobuild"
)

// buildFloor builds the floor the bars are measured against
// (integration/floor: an httputil reverse proxy that forwards bodies byte
// for byte) into dir. It is a program of its own, not this one
// re-executed: a copy of this program, the clients' and the upstream's,
// was measured faster than the same proxy built alone, and viewmux is never
// a copy of them (integration/floor's doc).
func buildFloor(ctx context.Context, dir string) (string, error) {
	return gobuild.BuildHere(ctx, "./integration/floor", filepath.Join(dir, "floor"))
}

// childFloor starts the floor bin in front of the upstream at upURL.
func childFloor(ctx context.Context, bin, upURL string) (*child, error) {
	return startChild(ctx, "floor", bin, []string{"-upstream", upURL}, "")
}
