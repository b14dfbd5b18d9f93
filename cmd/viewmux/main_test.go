package main

import (
	"os"
	"testing"
)

// asViewmuxEnv, set to "1", makes the test binary run as viewmux itself
// instead of running tests. Tests name the test binary as a stdio
// upstream's command (`demo-server --name N`) with this in its env table,
// so upstreams are real child processes that need nothing built.
const asViewmuxEnv = "VIEWMUX_TEST_AS_VIEWMUX"

func TestMain(m *testing.M) {
	if os.Getenv(asViewmuxEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
