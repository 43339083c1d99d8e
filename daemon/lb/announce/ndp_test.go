package announce

import (
	"net/netip"
	"testing"

	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

var (
	vip6    = netip.MustParseAddr("2001:db8:77::1:2345:6789")
	client6 = netip.MustParseAddr("2001:db8:77::10")
)

func TestUnsolicitedNA(t *testing.T) {
	want := l2.Advertisement{Src: vip6, Dst: l2.AllNodes, Target: vip6, Override: true, TargetLL: selfMAC}
	if na := unsolicitedNA(vip6, selfMAC); na != want {
		t.Errorf("unsolicitedNA = %+v; want only O, to all-nodes: %+v", na, want)
	}
}

func TestNDPAnswer(t *testing.T) {
	group := l2.SolicitedNode(vip6)
	other := l2.MAC{0x02, 0, 0, 0, 0, 0x99}
	for _, tc := range []struct {
		name string
		s    l2.Solicitation
		from l2.MAC
		na   l2.Advertisement // zero: no answer
		to   l2.MAC
	}{{
		name: "resolution: to the source link-layer option",
		s:    l2.Solicitation{Src: client6, Dst: group, Target: vip6, SourceLL: clientMAC, HasLL: true},
		from: other,
		na:   l2.Advertisement{Src: vip6, Dst: client6, Target: vip6, Solicited: true, Override: true, TargetLL: selfMAC},
		to:   clientMAC,
	}, {
		name: "unicast probe without option: to the frame's source",
		s:    l2.Solicitation{Src: client6, Dst: vip6, Target: vip6},
		from: clientMAC,
		na:   l2.Advertisement{Src: vip6, Dst: client6, Target: vip6, Solicited: true, Override: true, TargetLL: selfMAC},
		to:   clientMAC,
	}, {
		name: "DAD: all-nodes, no S",
		s:    l2.Solicitation{Src: netip.IPv6Unspecified(), Dst: group, Target: vip6},
		from: clientMAC,
		na:   l2.Advertisement{Src: vip6, Dst: l2.AllNodes, Target: vip6, Override: true, TargetLL: selfMAC},
		to:   l2.AllNodesMAC,
	}, {
		name: "our own frame",
		s:    l2.Solicitation{Src: client6, Dst: group, Target: vip6},
		from: selfMAC,
	}} {
		na, to, ok := ndpAnswer(tc.s, tc.from, selfMAC)
		if want := tc.na != (l2.Advertisement{}); ok != want || na != tc.na || to != tc.to {
			t.Errorf("%s: ndpAnswer = %+v to %s, %v; want %+v to %s", tc.name, na, to, ok, tc.na, tc.to)
		}
	}
}
