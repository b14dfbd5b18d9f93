package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/redact"
)

const (
	// maxStderrLine bounds one logged stderr line; longer lines are truncated.
	maxStderrLine = 64 << 10
	// killWait bounds the wait for the reaper after SIGKILL.
	killWait = 5 * time.Second
	// stderrDrainWait is how long the stderr logger gets to reach EOF once
	// the group is gone, before its pipe is closed under it.
	stderrDrainWait = 500 * time.Millisecond
	// groupPoll is how often an exiting process group is checked.
	groupPoll = 20 * time.Millisecond
)

// process is a stdio child we spawned, leader of its own process group. We
// own both ends of its pipes: nothing else spawns or kills it.
type process struct {
	log    *slog.Logger
	cmd    *exec.Cmd
	pgid   int
	stdin  *os.File // our write end; the engine writes to it
	stdout *os.File // our read end
	stderr *os.File // our read end

	exited     chan struct{} // closed once the child has been reaped
	stderrDone chan struct{} // closed when the stderr logger returns
	tail       stderrTail    // the last stderr lines, for a failed attempt's error

	// marker is this child's value of childMarkerEnv and started its start
	// time (Linux only; see descendants_linux.go): how its descendants are
	// found once they have left its process group.
	marker  string
	started uint64

	mu          sync.Mutex
	groupKilled bool // SIGKILL went to the group: never signal that pgid again
}

// startProcess spawns cfg's command in a new process group, with a reaper and
// a stderr logger started through spawn (which owns and guards them). onExit
// is called with the exit status once the child has been reaped.
//
// The child is bound to life, the Upstream's lifetime (never a request's or
// Start's ctx, whose end would kill it), and only as a backstop: its
// cancellation kills the group, but Close performs the graceful shutdown
// first. On Linux the child is also killed if viewmux itself dies
// (childProcAttr).
func startProcess(life context.Context, cfg *configs.Upstream, log *slog.Logger, secrets *redact.Secrets, spawn func(string, func()), onExit func(error)) (*process, error) {
	if cfg.Command == "" {
		return nil, errors.New("stdio upstream has no command")
	}
	cmd := exec.CommandContext(life, cfg.Command, cfg.Args...)
	cmd.Dir = cfg.Dir
	// Only what childEnv lets through: viewmux's environment holds its
	// tokens and every other upstream's secrets.
	cmd.Env = childEnv(os.Environ(), runtime.GOOS, cfg)
	cmd.SysProcAttr = childProcAttr()

	p := &process{log: log, cmd: cmd, exited: make(chan struct{}), stderrDone: make(chan struct{})}
	cmd.Cancel = func() error { return p.signalGroup(syscall.SIGKILL) }

	// Plain os.Pipe files rather than cmd.StdinPipe & co: exec then starts no
	// copying goroutines and cmd.Wait never closes our ends, so the reaper
	// may call Wait at once while the transport still reads stdout.
	var files []*os.File // every end, for cleanup on failure
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := children.start(cmd, p); err != nil {
		closeAll()
		return nil, fmt.Errorf("start %q: %w", cfg.Command, err)
	}
	// The child holds its own copies now; keeping ours would hide its EOF.
	inR.Close()
	outW.Close()
	errW.Close()
	p.stdin, p.stdout, p.stderr = inW, outR, errR
	p.pgid = cmd.Process.Pid // Setpgid with Pgid 0: the group id is the child's pid
	log.Debug("spawned stdio upstream", "pid", p.pgid, "command", cfg.Command)

	spawn("reaper", func() {
		err := exitErr(cmd.Wait())
		children.forget(p.pgid, p)
		close(p.exited)
		log.Info("stdio child exited", "pid", p.pgid, "status", err)
		onExit(fmt.Errorf("child exited: %w", err))
	})
	spawn("stderr logger", func() {
		defer close(p.stderrDone)
		logStderr(errR, log, &p.tail, secrets)
	})
	return p, nil
}

// exitErr turns a nil exit error into a readable one.
func exitErr(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}

// signalGroup sends sig to the child's whole process group. Because the
// group id is the child's pid, it may be signalled only while that id cannot
// have been reused: a group we have already SIGKILLed is never signalled
// again. (While any member lives the kernel keeps the id reserved.)
func (p *process) signalGroup(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.groupKilled || p.pgid <= 0 {
		return nil
	}
	if sig == syscall.SIGKILL {
		p.groupKilled = true
	}
	err := syscall.Kill(-p.pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// groupAlive reports whether any process of the group still exists.
func (p *process) groupAlive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.groupKilled {
		return false // never probe a pgid that may have been reused
	}
	return syscall.Kill(-p.pgid, 0) != syscall.ESRCH
}

// shutdown ends the child and its group: close stdin; wait up to stdinWait
// for the child to exit; SIGTERM the whole group; wait up to termWait for
// the group to empty; SIGKILL the group; reap. The group is signalled even
// when the child itself already exited, because wrappers
// (sh -c 'server & wait', npx) leave grandchildren in it. On Linux the
// child's strays, descendants that left the group (setsid) or outlived
// their parent, get the same signals at the same steps and are reaped when
// they are viewmux's orphans. It returns an error only if the child or a
// stray could not be ended.
func (p *process) shutdown(stdinWait, termWait time.Duration) error {
	// While the child lives its strays are found by parentage, so look
	// before it is asked to exit; later looks find them by marker.
	strays := p.strays()
	p.stdin.Close() // usually already closed by the transport
	waitClosed(p.exited, stdinWait)

	strays = mergeProcs(strays, p.strays())
	if p.groupAlive() || anyAlive(strays) {
		if err := p.signalGroup(syscall.SIGTERM); err != nil {
			p.log.Warn("SIGTERM to process group failed", "err", err)
		}
		signalAll(strays, syscall.SIGTERM)
		deadline := time.Now().Add(termWait)
		for (p.groupAlive() || anyAlive(strays)) && time.Now().Before(deadline) {
			time.Sleep(groupPoll)
		}
	}
	strays = mergeProcs(strays, p.strays())
	if p.groupAlive() || anyAlive(strays) {
		p.log.Warn("processes still running after SIGTERM; sending SIGKILL", "pgid", p.pgid, "outside_group", len(strays))
		if err := p.signalGroup(syscall.SIGKILL); err != nil {
			p.log.Warn("SIGKILL to process group failed", "err", err)
		}
		signalAll(strays, syscall.SIGKILL)
	}

	var err error
	if !waitClosed(p.exited, killWait) {
		err = fmt.Errorf("child %d did not exit after SIGKILL", p.pgid)
	}
	if !waitReaped(strays, killWait) {
		err = errors.Join(err, fmt.Errorf("descendants of child %d that left its process group did not exit after SIGKILL", p.pgid))
	}
	// Let the logger read what the group wrote last; a descendant that left
	// the group could hold the pipe open forever, so close it regardless.
	waitClosed(p.stderrDone, stderrDrainWait)
	p.stderr.Close()
	p.stdout.Close() // ends the engine's reader if it is still blocked
	return err
}

func waitClosed(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}
