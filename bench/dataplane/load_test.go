package dataplane

import (
	"slices"
	"testing"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string][]string{
		"nftables":           {"nftables"},
		"iptables":           {"iptables"},
		"ipvs":               {"ipvs"},
		"nftables+fast-path": {"nftables", "--fast-path"},
		"iptables+fast-path": {"iptables", "--fast-path"},
	} {
		mode, extra, err := parseMode(in)
		if err != nil || !slices.Equal(append([]string{mode}, extra...), want) {
			t.Errorf("parseMode(%q) = %q %q %v, want %q", in, mode, extra, err, want)
		}
	}
	for _, in := range []string{"ipvs+fast-path", "nftables+turbo", "userspace", ""} {
		if _, _, err := parseMode(in); err == nil {
			t.Errorf("parseMode(%q) accepted", in)
		}
	}
}

func TestReadCPU(t *testing.T) {
	a, err := readCPU()
	if err != nil {
		t.Fatal(err)
	}
	b, err := readCPU()
	if err != nil {
		t.Fatal(err)
	}
	if a.busy <= 0 || b.busy < a.busy {
		t.Errorf("busy CPU seconds %v then %v", a.busy, b.busy)
	}
}
