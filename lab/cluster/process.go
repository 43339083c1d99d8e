package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a process gets to exit on SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// process is one of the cluster's programs. It is signalled only by the PID it was started
// with, and it dies with the test binary (Pdeathsig), so a test that times out leaves no
// apiserver behind.
type process struct {
	name string
	log  string // stdout and stderr, appended to across restarts
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // why it exited; read only after done
}

// startProcess runs bin with args inside ns (through ip netns exec, which execs bin, so the
// PID is bin's own).
func startProcess(name string, ns namespace, logPath, bin string, args ...string) (*process, error) {
	argv := append([]string{bin}, args...)
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", string(ns)}, argv...)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	fmt.Fprintf(logf, "--- %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the PID, then SIGKILL after stopGrace, and waits for the exit.
func (p *process) stop() {
	if done, _ := p.exited(); done {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last lines of the process's log, for error messages.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(%s log: %v)", p.name, err)
	}
	return lastLines(string(b), n)
}
