package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// child is a helper process (the upstream server, the floor proxy): a
// process of its own, so its CPU time can be read from /proc like viewmux's,
// and so its traffic crosses a process boundary as viewmux's does.
type child struct {
	url string // what the child printed on its first line of stdout
	pid int
	// stop closes the child's stdin (its signal to shut down) and waits for
	// it, killing it after 5 s. Safe to call once.
	stop func() error
}

// startSelfChild re-executes this program with env (KEY=VALUE) added, and
// waits up to 30 s for the URL it prints on its first line of stdout.
func startSelfChild(ctx context.Context, role, env string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startChild(ctx, role, self, nil, env)
}

// startChild runs bin with args and env (KEY=VALUE; "" adds none), and
// waits up to 30 s for the URL it prints on its first line of stdout.
// Closing its stdin tells it to stop.
func startChild(ctx context.Context, role, bin string, args []string, env string) (*child, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	if env != "" {
		cmd.Env = append(cmd.Env, env)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = childAttr()
	stdin, err := cmd.StdinPipe() // closing it tells the child to stop
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s child: %w", role, err)
	}
	exited := make(chan error, 1)
	stop := func() error {
		stdin.Close()
		select {
		case err := <-exited:
			return err
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			return <-exited
		}
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	var url string
	select {
	case url = <-lines:
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
	}
	if !strings.HasPrefix(url, "http://") {
		_ = stop()
		return nil, fmt.Errorf("%s child did not report its URL (got %q)", role, url)
	}
	return &child{url: url, pid: cmd.Process.Pid, stop: stop}, nil
}

// serveAsChild is the end of main for a re-executed child: it prints url,
// then waits until stdin closes (the parent is done or gone) or a signal
// comes, and returns what closeFn returns.
func serveAsChild(url string, closeFn func() error) error {
	fmt.Println(url)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	<-ctx.Done()
	return closeFn()
}
