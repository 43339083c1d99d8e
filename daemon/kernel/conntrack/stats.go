package conntrack

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stats is the state of the connection tracking table of the network namespace, and of
// its SYN proxy.
type Stats struct {
	// Entries and Max: nf_conntrack_count and nf_conntrack_max.
	Entries, Max int
	// Cumulative since boot, summed over CPUs (/proc/net/stat/nf_conntrack): packets
	// conntrack found invalid, entries that could not be inserted, new connections dropped
	// because the table was full (Drop), and entries evicted to make room for new ones
	// (EarlyDrop).
	Invalid, InsertFailed, Drop, EarlyDrop uint64
	// SynProxy is nil while the kernel has no synproxy statistics (nothing used it yet).
	SynProxy *SynProxyStats
}

// Full reports whether the table is at its maximum.
func (s Stats) Full() bool { return s.Max > 0 && s.Entries >= s.Max }

// SynProxyStats are the kernel's synproxy counters (/proc/net/stat/synproxy), cumulative,
// summed over CPUs: SYNs answered with a cookie, ACKs whose cookie failed or passed, and
// retransmitted or reopened connections.
type SynProxyStats struct {
	SynReceived, CookieInvalid, CookieValid, CookieRetrans, ConnReopened uint64
}

// ReadStats reads the table's state in the calling thread's network namespace (f.ProcNet
// and f.ProcSys of the process are its namespace's).
func ReadStats(f Files) (Stats, error) {
	var s Stats
	var err error
	if s.Entries, err = readInt(filepath.Join(f.ProcSys, "net/netfilter/nf_conntrack_count")); err != nil {
		return s, err
	}
	if s.Max, err = readInt(filepath.Join(f.ProcSys, "net/netfilter/nf_conntrack_max")); err != nil {
		return s, err
	}
	b, err := os.ReadFile(filepath.Join(f.ProcNet, "stat/nf_conntrack"))
	if err != nil {
		return s, err
	}
	ct, err := ParseStatTable(b)
	if err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(f.ProcNet, "stat/nf_conntrack"), err)
	}
	s.Invalid, s.InsertFailed, s.Drop, s.EarlyDrop = ct["invalid"], ct["insert_failed"], ct["drop"], ct["early_drop"]
	b, err = os.ReadFile(filepath.Join(f.ProcNet, "stat/synproxy"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return s, err
	}
	sp, err := ParseSynProxy(b)
	if err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(f.ProcNet, "stat/synproxy"), err)
	}
	s.SynProxy = &sp
	return s, nil
}

// ParseSynProxy reads /proc/net/stat/synproxy.
func ParseSynProxy(b []byte) (SynProxyStats, error) {
	sp, err := ParseStatTable(b)
	if err != nil {
		return SynProxyStats{}, err
	}
	return SynProxyStats{SynReceived: sp["syn_received"], CookieInvalid: sp["cookie_invalid"],
		CookieValid: sp["cookie_valid"], CookieRetrans: sp["cookie_retrans"], ConnReopened: sp["conn_reopened"]}, nil
}

// ParseStatTable reads a /proc/net/stat table: a line of column names, then one line of
// hexadecimal values per CPU. It returns each column summed over the CPUs, except
// "entries", which every line repeats (the first line's is kept).
func ParseStatTable(b []byte) (map[string]uint64, error) {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) < 2 {
		return nil, errors.New("no values under the header")
	}
	names := strings.Fields(string(lines[0]))
	out := make(map[string]uint64, len(names))
	for i, line := range lines[1:] {
		f := strings.Fields(string(line))
		if len(f) != len(names) {
			return nil, fmt.Errorf("line %d has %d values for %d columns", i+2, len(f), len(names))
		}
		for j, v := range f {
			n, err := strconv.ParseUint(v, 16, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d, %s: %w", i+2, names[j], err)
			}
			if names[j] == "entries" && i > 0 {
				continue
			}
			out[names[j]] += n
		}
	}
	return out, nil
}
