package conntrack

import (
	"os"
	"path/filepath"
	"testing"
)

// Two CPUs' lines as the 6.1 and 6.18 kernels print them (entries repeats on every line).
const (
	ctStat = `entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
000000c8  00000000 00000003 00000000 0000000a 00000000 00000000 00000000 00000000 00000001 00000010 00000002 00000000  00000000 00000000 00000000 00000000
000000c8  00000000 00000001 00000000 00000005 00000000 00000000 00000000 00000000 00000002 00000020 00000003 00000000  00000000 00000000 00000000 00000004
`
	spStat = "entries\t\tsyn_received\tcookie_invalid\tcookie_valid\tcookie_retrans\tconn_reopened\n" +
		"00000000\t00000002\t00000001\t00000002\t00000000\t00000000\n" +
		"00000000\t0000001e\t00000000\t0000001e\t00000001\t00000000\n"
)

func TestReadStats(t *testing.T) {
	root := t.TempDir()
	f := Files{ProcSys: filepath.Join(root, "sys"), ProcNet: filepath.Join(root, "net")}
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(f.ProcSys, "net/netfilter/nf_conntrack_count"), "200\n")
	write(filepath.Join(f.ProcSys, "net/netfilter/nf_conntrack_max"), "200\n")
	write(filepath.Join(f.ProcNet, "stat/nf_conntrack"), ctStat)
	s, err := ReadStats(f)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Entries: 200, Max: 200, Invalid: 15, InsertFailed: 3, Drop: 48, EarlyDrop: 5}
	if s != want {
		t.Errorf("without synproxy: %+v, want %+v", s, want)
	}
	if !s.Full() {
		t.Error("200 of 200 is not full")
	}
	write(filepath.Join(f.ProcNet, "stat/synproxy"), spStat)
	if s, err = ReadStats(f); err != nil {
		t.Fatal(err)
	}
	if sp := s.SynProxy; sp == nil || *sp != (SynProxyStats{SynReceived: 32, CookieInvalid: 1, CookieValid: 32, CookieRetrans: 1}) {
		t.Errorf("synproxy: %+v", sp)
	}
}

func TestParseStatTableRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"header only": "entries drop\n",
		"short line":  "entries drop\n00000001\n",
		"not hex":     "entries drop\n00000001 zz\n",
		"empty":       "",
	} {
		if _, err := ParseStatTable([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
