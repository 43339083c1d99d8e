package conntrack

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeFiles lays out the files Tune reads under temporary /proc/sys and /sys roots.
func fakeFiles(t *testing.T, values map[string]string) Files {
	t.Helper()
	f := Files{ProcSys: t.TempDir(), Sys: t.TempDir()}
	for name, v := range values {
		root := f.ProcSys
		if strings.HasPrefix(name, "module/") {
			root = f.Sys
		}
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func read(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func debianDefaults() map[string]string {
	return map[string]string{
		maxFile:      "65536",
		hashsizeFile: "16384",
		"net/netfilter/nf_conntrack_tcp_timeout_established": "432000",
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "60",
		"net/netfilter/nf_conntrack_udp_timeout":             "30",
		"net/netfilter/nf_conntrack_udp_timeout_stream":      "120",
		"net/netfilter/nf_conntrack_tcp_be_liberal":          "0",
	}
}

// TestTuneDefaults: kube-proxy's defaults on a 2-core box raise the table to the 131072
// minimum and the hash size to a quarter of it, set the TCP timeouts, and leave the UDP
// ones (zero) alone; a second run changes nothing.
func TestTuneDefaults(t *testing.T) {
	f := fakeFiles(t, debianDefaults())
	changes, err := Tune(f, DefaultTuning, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.String())
	}
	want := []string{
		"net/netfilter/nf_conntrack_max 65536 -> 131072",
		"module/nf_conntrack/parameters/hashsize 16384 -> 32768",
		"net/netfilter/nf_conntrack_tcp_timeout_established 432000 -> 86400",
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait 60 -> 3600",
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes:\n got %q\nwant %q", got, want)
	}
	if v := read(t, f.ProcSys, "net/netfilter/nf_conntrack_udp_timeout"); v != "30" {
		t.Errorf("udp timeout %s, want it left at 30", v)
	}
	if changes, err := Tune(f, DefaultTuning, 2); err != nil || len(changes) != 0 {
		t.Errorf("second run: %v, %v; want nothing to change", changes, err)
	}
}

// TestTuneScalesAndNeverLowers: many cores scale the table past the minimum; a table and
// hash already larger than wanted stay as the operator made them; every option applies.
func TestTuneScalesAndNeverLowers(t *testing.T) {
	f := fakeFiles(t, debianDefaults())
	all := Tuning{MaxPerCore: 32768, Min: 131072, TCPEstablished: time.Hour, TCPCloseWait: time.Minute,
		UDP: 45 * time.Second, UDPStream: 3 * time.Minute, TCPBeLiberal: true}
	if _, err := Tune(f, all, 16); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		maxFile: "524288", "net/netfilter/nf_conntrack_tcp_timeout_established": "3600",
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait": "60", "net/netfilter/nf_conntrack_udp_timeout": "45",
		"net/netfilter/nf_conntrack_udp_timeout_stream": "180", "net/netfilter/nf_conntrack_tcp_be_liberal": "1",
	} {
		if v := read(t, f.ProcSys, name); v != want {
			t.Errorf("%s = %s, want %s", name, v, want)
		}
	}
	if v := read(t, f.Sys, hashsizeFile); v != "131072" {
		t.Errorf("hashsize %s, want 131072", v)
	}
	big := debianDefaults()
	big[maxFile], big[hashsizeFile] = "1048576", "262144"
	f = fakeFiles(t, big)
	if changes, err := Tune(f, DefaultTuning, 2); err != nil || slices.ContainsFunc(changes, func(c Change) bool { return c.Name == maxFile || c.Name == hashsizeFile }) {
		t.Errorf("a larger table: %v, %v; want it left", changes, err)
	}
}

func TestTuneWithoutModule(t *testing.T) {
	f := Files{ProcSys: t.TempDir(), Sys: t.TempDir()}
	_, err := Tune(f, DefaultTuning, 2)
	if err == nil || !strings.Contains(err.Error(), "nf_conntrack_max: not there (is nf_conntrack loaded?)") {
		t.Errorf("no module: %v", err)
	}
}
