package ipvslink

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Sysctls reads and writes kernel parameters by their /proc/sys path ("net/ipv4/vs/conntrack").
type Sysctls interface {
	Read(name string) (string, error)
	Write(name, value string) error
}

// ProcSys is the Sysctls under a /proc/sys directory (tests use a temporary one).
type ProcSys struct{ Root string }

// Read implements Sysctls.
func (p ProcSys) Read(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(p.Root, name))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Write implements Sysctls.
func (p ProcSys) Write(name, value string) error {
	return os.WriteFile(filepath.Join(p.Root, name), []byte(value+"\n"), 0o644)
}

// Setting is one sysctl IPVS mode sets, with its reason.
type Setting struct {
	Name, Value, Why string
}

// Settings returns the sysctls IPVS mode needs on a kernel release ("6.1.0-28-amd64"),
// kube-proxy's in its IPVS mode.
func Settings(release string) []Setting {
	// conn_reuse_mode 1 reschedules a new connection that reuses a client port of an old
	// one, so it never lands on a real server at weight 0 or removed; kernels before 5.9
	// stalled such connections for a second, and there 0 is the lesser evil.
	reuse := Setting{"net/ipv4/vs/conn_reuse_mode", "1", "reschedule reused client ports (never onto a weight-0 real server)"}
	if major, minor, ok := kernelVersion(release); ok && (major < 5 || major == 5 && minor < 9) {
		reuse = Setting{"net/ipv4/vs/conn_reuse_mode", "0", "kernels before 5.9 stall reused connections for a second with 1"}
	}
	return []Setting{
		{"net/ipv4/vs/conntrack", "1", "keep conntrack entries for IPVS connections, so that masquerade and the auxiliary rules see them"},
		reuse,
		{"net/ipv4/vs/expire_nodest_conn", "1", "drop the connections of a removed real server at their next packet instead of stalling"},
		{"net/ipv4/vs/expire_quiescent_template", "1", "end persistence to a real server at weight 0"},
		{"net/ipv4/conf/all/arp_ignore", "1", "strict ARP: answer only for addresses of the receiving interface, never for a VIP on the dummy"},
		{"net/ipv4/conf/all/arp_announce", "2", "strict ARP: never announce a VIP as an ARP source"},
		{"net/ipv4/ip_forward", "1", "IPVS NAT forwards to real servers and back"},
	}
}

// kernelVersion parses the major and minor numbers of a kernel release.
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor, err1 == nil && err2 == nil
}

// EnsureSysctls sets every Setting whose value differs and returns the names it changed.
// A missing net/ipv4/vs entry means ip_vs is not loaded.
func EnsureSysctls(s Sysctls, release string) ([]string, error) {
	var changed []string
	for _, set := range Settings(release) {
		cur, err := s.Read(set.Name)
		if err != nil {
			if strings.HasPrefix(set.Name, "net/ipv4/vs/") && os.IsNotExist(err) {
				return changed, fmt.Errorf("%w: sysctl %s: %v", ErrNotAvailable, set.Name, err)
			}
			return changed, fmt.Errorf("sysctl %s: %w", set.Name, err)
		}
		if cur == set.Value {
			continue
		}
		if err := s.Write(set.Name, set.Value); err != nil {
			return changed, fmt.Errorf("sysctl %s=%s (%s): %w", set.Name, set.Value, set.Why, err)
		}
		changed = append(changed, set.Name+"="+set.Value)
	}
	return changed, nil
}
