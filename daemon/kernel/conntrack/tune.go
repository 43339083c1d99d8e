package conntrack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Tuning is the connection tracking table's size and timeouts, kube-proxy's conntrack
// configuration with its meaning: a zero leaves that setting as the kernel has it.
type Tuning struct {
	// MaxPerCore sizes the table: nf_conntrack_max is MaxPerCore times the CPUs, at least
	// Min. A gateway forwards every connection of its services: a table that fills drops
	// new connections ("nf_conntrack: table full").
	MaxPerCore, Min int
	// TCPEstablished and TCPCloseWait time out idle TCP entries; UDP and UDPStream, UDP
	// entries seen in one direction and in both.
	TCPEstablished, TCPCloseWait, UDP, UDPStream time.Duration
	// TCPBeLiberal accepts out-of-window TCP packets instead of marking them invalid.
	TCPBeLiberal bool
}

// DefaultTuning is kube-proxy's default.
var DefaultTuning = Tuning{MaxPerCore: 32768, Min: 131072, TCPEstablished: 24 * time.Hour, TCPCloseWait: time.Hour}

// Files are the roots of /proc/sys, /sys and /proc/net (tests use temporary directories).
type Files struct{ ProcSys, Sys, ProcNet string }

// Host is the running kernel's.
var Host = Files{ProcSys: "/proc/sys", Sys: "/sys", ProcNet: "/proc/net"}

// Change is one setting Tune made.
type Change struct{ Name, From, To string }

func (c Change) String() string { return fmt.Sprintf("%s %s -> %s", c.Name, c.From, c.To) }

// ErrNotHere marks settings the kernel keeps for the initial network namespace: the table
// size and hash size are global, read-only in any other namespace (a daemon in a
// container or a test's namespace). The timeouts are set regardless.
var ErrNotHere = errors.New("global setting, read-only outside the initial network namespace")

const (
	maxFile      = "net/netfilter/nf_conntrack_max"
	hashsizeFile = "module/nf_conntrack/parameters/hashsize"
)

// Tune applies t on a machine with cores CPUs and returns what it changed. The nf_conntrack
// module must be loaded (its files exist once rules use connection tracking). The table
// size is raised to max(MaxPerCore*cores, Min) and the hash size to a quarter of it, as
// kube-proxy does, but neither is ever lowered: an operator's larger table stays. Every
// setting is tried; the error joins those that failed.
func Tune(f Files, t Tuning, cores int) ([]Change, error) {
	var changes []Change
	var errs []error
	set := func(root, name, value string) bool {
		c, err := write(filepath.Join(root, name), name, value)
		if err != nil {
			errs = append(errs, err)
			return false
		}
		if c != nil {
			changes = append(changes, *c)
		}
		return true
	}
	if t.MaxPerCore > 0 || t.Min > 0 {
		ok := false
		n := max(t.MaxPerCore*cores, t.Min)
		cur, err := readInt(filepath.Join(f.ProcSys, maxFile))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("%s: not there (is nf_conntrack loaded?): %w", maxFile, err))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", maxFile, err))
		case cur < n:
			ok = set(f.ProcSys, maxFile, strconv.Itoa(n))
		default:
			ok = true
		}
		if ok {
			if cur, err := readInt(filepath.Join(f.Sys, hashsizeFile)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", hashsizeFile, err))
			} else if cur < n/4 {
				set(f.Sys, hashsizeFile, strconv.Itoa(n/4))
			}
		}
	}
	for _, s := range []struct {
		name string
		d    time.Duration
	}{
		{"net/netfilter/nf_conntrack_tcp_timeout_established", t.TCPEstablished},
		{"net/netfilter/nf_conntrack_tcp_timeout_close_wait", t.TCPCloseWait},
		{"net/netfilter/nf_conntrack_udp_timeout", t.UDP},
		{"net/netfilter/nf_conntrack_udp_timeout_stream", t.UDPStream},
	} {
		if s.d > 0 {
			set(f.ProcSys, s.name, strconv.Itoa(int(s.d.Round(time.Second)/time.Second)))
		}
	}
	if t.TCPBeLiberal {
		set(f.ProcSys, "net/netfilter/nf_conntrack_tcp_be_liberal", "1")
	}
	return changes, errors.Join(errs...)
}

// write sets one file to value unless it holds it already.
func write(path, name, value string) (*Change, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: not there (is nf_conntrack loaded?): %w", name, err)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cur := strings.TrimSpace(string(b))
	if cur == value {
		return nil, nil
	}
	if err := os.WriteFile(path, []byte(value+"\n"), 0); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("%s stays %s (wanted %s): %w: %v", name, cur, value, ErrNotHere, err)
		}
		return nil, fmt.Errorf("%s: set %s: %w", name, value, err)
	}
	return &Change{Name: name, From: cur, To: value}, nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
