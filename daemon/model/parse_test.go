package model_test

import (
	"net/netip"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
)

// TestParsePrefix: source ranges as kube-proxy reads them, and what it must not admit.
func TestParsePrefix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" for refused
	}{
		{"10.200.1.0/24", "10.200.1.0/24"},
		{" 10.200.1.0/24 ", "10.200.1.0/24"},
		{"10.200.1.7/24", "10.200.1.0/24"},
		{"010.200.001.000/24", "10.200.1.0/24"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"\t2001:db8::1/32\n", "2001:db8::/32"},
		{"10.200.1.0/33", ""},
		{"10.200.1.0", ""},
		{"fe80::/10%eth0", ""},
		{"::ffff:10.200.1.0/120", ""},
		{"::ffff:010.200.1.0/120", ""},
		{"", ""},
	} {
		p, ok := model.ParsePrefix(tc.in)
		got := ""
		if ok {
			got = p.String()
		}
		if got != tc.want {
			t.Errorf("ParsePrefix(%q) = %q (ok %t), want %q", tc.in, p, ok, tc.want)
		}
	}
}

// TestParseAddr: addresses as kube-proxy reads them.
func TestParseAddr(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"10.200.1.1", "10.200.1.1"},
		{"010.200.001.001", "10.200.1.1"},
		{"fd00::1", "fd00::1"},
		{"::ffff:10.0.0.1", "::ffff:10.0.0.1"}, // unmapped by the callers that want it
		{"fe80::1%eth0", ""},
		{"10.200.1", ""},
		{"", ""},
	} {
		a, ok := model.ParseAddr(tc.in)
		got := ""
		if ok {
			got = a.String()
		}
		if got != tc.want {
			t.Errorf("ParseAddr(%q) = %v (ok %t), want %q", tc.in, a, ok, tc.want)
		}
	}
	if a, _ := model.ParseAddr("010.0.0.1"); !a.Is4() || a != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("a sloppy IPv4 address is %v, want it 4 bytes long", a)
	}
}
