package main

import (
	"os"
	"testing"
)

// asMcpmuxEnv, set to "1", makes the test binary run as mcpmux itself
// instead of running tests. Tests name the test binary as a stdio
// upstream's command (`demo-server --name N`) with this in its env table,
// so upstreams are real child processes that need nothing built.
const asMcpmuxEnv = "MCPMUX_TEST_AS_MCPMUX"

func TestMain(m *testing.M) {
	if os.Getenv(asMcpmuxEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
