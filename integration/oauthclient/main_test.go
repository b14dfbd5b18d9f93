//go:build unix

package oauthclient

import (
	"os"
	"testing"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

func TestMain(m *testing.M) { os.Exit(itest.RunTests(m)) }
