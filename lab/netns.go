package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/edgegate/edgegate/lab/nsthread"
)

// netnsDir is where named network namespaces are bound, as `ip netns` binds them, so
// that the stock tools (and tests that hold only a name) find the lab's namespaces.
const netnsDir = "/run/netns"

// newNamespace creates a network namespace bound at /run/netns/<name> and returns a handle
// to it. The calling goroutine's thread never enters it.
func newNamespace(name string) (netns.NsHandle, error) {
	h := netns.None()
	err := nsthread.Run(netns.None(), "new namespace "+name, func() error {
		var err error
		// NewNamed unshares this thread into the new namespace; nsthread.Run moves it back.
		h, err = netns.NewNamed(name)
		return err
	})
	return h, err
}

// deleteNamespace unbinds a namespace made by newNamespace. The namespace itself goes,
// with its links, rules and conntrack entries, once no process and no handle holds it.
func deleteNamespace(name string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	return nil
}

// Do runs fn on an OS thread that has entered h's network namespace, so sockets fn creates
// belong to h. Sockets keep their namespace for life, so they may be used from any
// goroutine afterwards.
func (h *Host) Do(fn func() error) error {
	return nsthread.Run(h.ns, h.Name, fn)
}

// Start starts cmd inside h's network namespace: the child is forked from a thread in
// that namespace and inherits it, so no `ip netns exec` (nor any other program) is needed,
// which is what lets the lab run inside the firmware, where edgegate is the only program.
// A Pdeathsig in cmd.SysProcAttr refers to that thread, which outlives the call.
func (h *Host) Start(cmd *exec.Cmd) error {
	if err := h.Do(cmd.Start); err != nil {
		return fmt.Errorf("start %s in %s: %w", cmd.Path, h.Name, err)
	}
	return nil
}

// DialContext dials from inside h's namespace.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Sysctl sets kernel parameters in h's namespace, sysctl(8)-style ("net.ipv4.ip_forward=1"):
// /proc/sys/net resolves to the namespace of the thread that opens it.
func (h *Host) Sysctl(settings ...string) error {
	return h.Do(func() error {
		for _, s := range settings {
			name, value, ok := strings.Cut(s, "=")
			if !ok {
				return fmt.Errorf("sysctl %q: want name=value", s)
			}
			file := filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
			if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil {
				return fmt.Errorf("sysctl %s in %s: %w", s, h.Name, err)
			}
		}
		return nil
	})
}

// ReadSysctl reads one kernel parameter of h's namespace ("net.ipv4.vs.conntrack").
func (h *Host) ReadSysctl(name string) (string, error) {
	var v []byte
	err := h.Do(func() error {
		var err error
		v, err = os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/")))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("sysctl %s in %s: %w", name, h.Name, err)
	}
	return string(bytes.TrimSpace(v)), nil
}

// ReadProcNet reads /proc/net/NAME ("ip_vs", "ip_vs_conn") as h's namespace has it.
func (h *Host) ReadProcNet(name string) ([]byte, error) {
	var data []byte
	err := h.Do(func() error {
		var err error
		// /proc/net is the process's namespace; thread-self's is this thread's.
		data, err = os.ReadFile(filepath.Join("/proc/thread-self/net", name))
		return err
	})
	return data, err
}
