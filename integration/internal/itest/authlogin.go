//go:build unix

package itest

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// loginURLLine is the line of `viewmux auth login --no-browser` that
// holds the URL to open.
var loginURLLine = regexp.MustCompile(`^  (http://\S+)$`)

// AuthLogin runs `viewmux auth login --no-browser upstream` with the
// binary bin and the config at cfgPath, in dir, as the operator, and
// follows the URL it prints as the operator's browser would (the test
// authorization servers approve it at once and redirect to the command's
// loopback callback). It returns that URL and what the command printed
// (its stdout, then its stderr), and fails t if the command prints no URL
// or does not succeed.
func AuthLogin(t testing.TB, bin, dir, cfgPath, upstream string) (authURL, output string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "auth", "login", "--no-browser", "--config", cfgPath, upstream)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var out strings.Builder
	for authURL == "" && sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if m := loginURLLine.FindStringSubmatch(sc.Text()); m != nil {
			authURL = m[1]
		}
	}
	if authURL == "" {
		cmd.Wait()
		t.Fatalf("auth login %s with %s printed no URL:\n%s\n%s", upstream, cfgPath, out.String(), stderr.String())
	}
	resp, err := http.Get(authURL) // approved at once, redirected to the loopback callback
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rest, _ := io.ReadAll(stdout)
	out.Write(rest)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("auth login %s with %s: %v\n%s\n%s", upstream, cfgPath, err, out.String(), stderr.String())
	}
	return authURL, out.String() + stderr.String()
}
