package ipt

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables/expr"

	"github.com/edgegate/edgegate/daemon/model"
)

// TestAddrEncoding pins iptables-nft's add_addr rule: whole-byte prefixes load and compare
// only their bytes, others load the address and mask it, /0 matches without expressions.
func TestAddrEncoding(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		not    bool
		want   string
	}{
		{"10.96.0.10/32", false, "payload 16+4 | cmp 0 [10 96 0 10]"},
		{"127.0.0.0/8", true, "payload 16+1 | cmp 1 [127]"},
		{"10.200.0.0/20", false, "payload 16+4 | bitwise [255 255 240 0] | cmp 0 [10 200 0 0]"},
		{"10.200.7.9/20", false, "payload 16+4 | bitwise [255 255 240 0] | cmp 0 [10 200 0 0]"},
		{"0.0.0.0/0", false, ""},
		{"fd00:200::/48", true, "payload 24+6 | cmp 1 [253 0 2 0 0 0]"},
	} {
		e := encoder{family: model.FamilyOf(netip.MustParsePrefix(tc.prefix).Addr())}
		exprs, err := e.addr(false, netip.MustParsePrefix(tc.prefix), tc.not)
		if err != nil {
			t.Errorf("%s: %v", tc.prefix, err)
			continue
		}
		var got []string
		for _, x := range exprs {
			got = append(got, describe(x))
		}
		if s := strings.Join(got, " | "); s != tc.want {
			t.Errorf("-d %s: got %q, want %q", tc.prefix, s, tc.want)
		}
	}
	if _, err := (encoder{family: model.IPv4}).addr(true, netip.MustParsePrefix("0.0.0.0/0"), true); err == nil {
		t.Error("! -s 0.0.0.0/0 was encoded; iptables-nft refuses it")
	}
	if _, err := (encoder{family: model.IPv6}).addr(true, netip.MustParsePrefix("10.0.0.0/8"), false); err == nil {
		t.Error("an IPv4 source was encoded into an IPv6 rule")
	}
}

func describe(x expr.Any) string {
	switch x := x.(type) {
	case *expr.Payload:
		return fmt.Sprintf("payload %d+%d", x.Offset, x.Len)
	case *expr.Bitwise:
		return fmt.Sprintf("bitwise %v", x.Mask)
	case *expr.Cmp:
		return fmt.Sprintf("cmp %d %v", x.Op, x.Data)
	}
	return fmt.Sprintf("%T", x)
}
