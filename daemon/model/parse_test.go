package model_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
)

// parseCase is an input and what it parses to, as a string; "" for refused.
type parseCase struct{ in, want string }

// checkParse parses each case's input with parse, named name, and compares the result's
// String with the case's want.
func checkParse[T fmt.Stringer](t *testing.T, name string, parse func(string) (T, bool), cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		v, ok := parse(tc.in)
		got := ""
		if ok {
			got = v.String()
		}
		if got != tc.want {
			t.Errorf("%s(%q) = %q (ok %t), want %q", name, tc.in, v, ok, tc.want)
		}
	}
}

// TestParsePrefix: source ranges as kube-proxy reads them, and what it must not admit.
func TestParsePrefix(t *testing.T) {
	checkParse(t, "ParsePrefix", model.ParsePrefix, []parseCase{
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
	})
}

// TestParseAddr: addresses as kube-proxy reads them.
func TestParseAddr(t *testing.T) {
	checkParse(t, "ParseAddr", model.ParseAddr, []parseCase{
		{"10.200.1.1", "10.200.1.1"},
		{"010.200.001.001", "10.200.1.1"},
		{"fd00::1", "fd00::1"},
		{"::ffff:10.0.0.1", "::ffff:10.0.0.1"}, // unmapped by the callers that want it
		{"fe80::1%eth0", ""},
		{"10.200.1", ""},
		{"", ""},
	})
	if a, _ := model.ParseAddr("010.0.0.1"); !a.Is4() || a != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("a sloppy IPv4 address is %v, want it 4 bytes long", a)
	}
}
