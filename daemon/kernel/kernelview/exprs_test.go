package kernelview

import (
	"net/netip"
	"testing"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// raw4 lays an expression out as the kernel returns it in an ip table: its name and its
// attributes.
func raw4(t *testing.T, name string, e expr.Any) rawExpr {
	t.Helper()
	data, err := expr.MarshalExprData(unix.NFPROTO_IPV4, e)
	if err != nil {
		t.Fatal(err)
	}
	return rawExpr{name: name, data: data}
}

// TestRuleRendering: the expressions edgegate and iptables-nft write read as nft and
// iptables-save print them; an expression or an xtables match edgegate does not read
// prints raw, by name and attributes, in either style.
func TestRuleRendering(t *testing.T) {
	const reg1 = unix.NFT_REG_1
	dst := func(bytes uint32) rawExpr {
		return raw4(t, "payload", &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: bytes})
	}
	comment := xt.Comment("by hand")
	dnat := make([]byte, 40) // nf_nat_range2: map IPs, proto specified; 10.0.1.1:8080
	copy(dnat, binaryutil.NativeEndian.PutUint32(0x3))
	copy(dnat[4:], netip.MustParseAddr("10.0.1.1").AsSlice())
	copy(dnat[36:], binaryutil.BigEndian.PutUint16(8080))
	for _, tc := range []struct {
		name     string
		exprs    []rawExpr
		comment  string
		nft, ipt string
	}{{
		name: "an iptables-nft DNAT rule",
		exprs: []rawExpr{
			raw4(t, "meta", &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1}),
			raw4(t, "cmp", &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}}),
			dst(3), raw4(t, "cmp", &expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{10, 96, 0}}),
			raw4(t, "match", &expr.Match{Name: "comment", Info: &comment}),
			raw4(t, "counter", &expr.Counter{}),
			raw4(t, "target", &expr.Target{Name: "DNAT", Rev: 2, Info: unknown(dnat)}),
		},
		nft: `meta l4proto tcp ip daddr != 10.96.0.0/24 xt match comment --comment "by hand" counter xt target DNAT --to-destination 10.0.1.1:8080`,
		ipt: `-p tcp ! -d 10.96.0.0/24 -m comment --comment "by hand" -j DNAT --to-destination 10.0.1.1:8080`,
	}, {
		name: "edgegate's endpoint rule",
		exprs: []rawExpr{
			raw4(t, "counter", &expr.Counter{}),
			raw4(t, "immediate", &expr.Immediate{Register: reg1, Data: netip.MustParseAddr("10.0.1.2").AsSlice()}),
			raw4(t, "immediate", &expr.Immediate{Register: unix.NFT_REG_2, Data: binaryutil.BigEndian.PutUint16(8080)}),
			raw4(t, "nat", &expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: unix.NFT_REG_2}),
		},
		comment: "endpoint-X",
		nft:     `counter dnat to 10.0.1.2:8080 comment "endpoint-X"`,
		ipt:     `[dnat to 10.0.1.2:8080] -m comment --comment "endpoint-X"`,
	}, {
		name: "another program's expression and xtables match",
		exprs: []rawExpr{
			{name: "frobnicate", data: []byte{8, 0, 1, 0, 0, 0, 0, 42}},
			raw4(t, "match", &expr.Match{Name: "owner", Rev: 1, Info: unknown([]byte{1, 2, 3, 4})}),
			raw4(t, "immediate", &expr.Verdict{Kind: expr.VerdictJump, Chain: "KUBE-SERVICES"}),
		},
		nft: "[frobnicate 1=0x0000002a] xt match owner --rev 1 --info 0x01020304 jump KUBE-SERVICES",
		ipt: "[[frobnicate 1=0x0000002a]] -m owner --rev 1 --info 0x01020304 -j KUBE-SERVICES",
	}} {
		for _, s := range []struct {
			style style
			want  string
		}{{nftStyle, tc.nft}, {iptStyle, tc.ipt}} {
			r := &ruleRenderer{family: unix.NFPROTO_IPV4, style: s.style}
			if got := r.rule(tc.exprs, tc.comment); got != s.want {
				t.Errorf("%s, style %d:\n got %s\nwant %s", tc.name, s.style, got, s.want)
			}
		}
	}
}

// unknown is an xtables info struct given byte for byte.
func unknown(b []byte) *xt.Unknown {
	u := xt.Unknown(b)
	return &u
}
