package announce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
)

var (
	vip6    = netip.MustParseAddr("2001:db8:77::1:2345:6789")
	client6 = netip.MustParseAddr("2001:db8:77::10")
)

// ipv6Packet wraps an ICMPv6 message of type typ in an IPv6 header. The checksum comes
// from golang.org/x/net/icmp, an implementation independent of ours.
func ipv6Packet(t testing.TB, typ ipv6.ICMPType, src, dst netip.Addr, hop uint8, body []byte) []byte {
	t.Helper()
	m, err := (&icmp.Message{Type: typ, Body: &icmp.RawBody{Data: body}}).
		Marshal(icmp.IPv6PseudoHeader(src.AsSlice(), dst.AsSlice()))
	if err != nil {
		t.Fatal(err)
	}
	h := make([]byte, ipv6HeaderLen)
	h[0] = 6 << 4
	binary.BigEndian.PutUint16(h[4:6], uint16(len(m)))
	h[6], h[7] = protoICMPv6, hop
	s, d := src.As16(), dst.As16()
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
	return append(h, m...)
}

// nsBody is a solicitation's body after the checksum: reserved word, target, options.
func nsBody(target netip.Addr, opts ...byte) []byte {
	t := target.As16()
	return append(append(make([]byte, 4), t[:]...), opts...)
}

func sllOption(m mac) []byte { return append([]byte{optSourceLL, 1}, m[:]...) }

func TestParseNS(t *testing.T) {
	group := solicitedNode(vip6)
	for _, tc := range []struct {
		name string
		pkt  []byte
		want solicitation
	}{{
		name: "address resolution",
		pkt:  ipv6Packet(t, ipv6.ICMPTypeNeighborSolicitation, client6, group, 255, nsBody(vip6, sllOption(clientMAC)...)),
		want: solicitation{Src: client6, Dst: group, Target: vip6, SourceLL: clientMAC, HasLL: true},
	}, {
		name: "unreachability probe, unicast, no option",
		pkt:  ipv6Packet(t, ipv6.ICMPTypeNeighborSolicitation, client6, vip6, 255, nsBody(vip6)),
		want: solicitation{Src: client6, Dst: vip6, Target: vip6},
	}, {
		name: "DAD probe",
		pkt:  ipv6Packet(t, ipv6.ICMPTypeNeighborSolicitation, netip.IPv6Unspecified(), group, 255, nsBody(vip6)),
		want: solicitation{Src: netip.IPv6Unspecified(), Dst: group, Target: vip6},
	}, {
		name: "unknown option skipped",
		pkt:  ipv6Packet(t, ipv6.ICMPTypeNeighborSolicitation, client6, group, 255, nsBody(vip6, 14, 1, 1, 2, 3, 4, 5, 6)),
		want: solicitation{Src: client6, Dst: group, Target: vip6},
	}} {
		got, err := parseNS(tc.pkt)
		if err != nil || got != tc.want {
			t.Errorf("%s: parseNS = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestParseNSRejects(t *testing.T) {
	group := solicitedNode(vip6)
	ns := func(src, dst netip.Addr, hop uint8, body []byte) []byte {
		return ipv6Packet(t, ipv6.ICMPTypeNeighborSolicitation, src, dst, hop, body)
	}
	good := ns(client6, group, 255, nsBody(vip6, sllOption(clientMAC)...))
	mod := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	for name, pkt := range map[string][]byte{
		"hop limit 254 (forwarded)": ns(client6, group, 254, nsBody(vip6)),
		"hop limit 64":              ns(client6, group, 64, nsBody(vip6)),
		"bad checksum":              mod(func(b []byte) { b[ipv6HeaderLen+2] ^= 1 }),
		"code 1":                    mod(func(b []byte) { b[ipv6HeaderLen+1] = 1 }),
		"advertisement":             ipv6Packet(t, ipv6.ICMPTypeNeighborAdvertisement, client6, group, 255, nsBody(vip6)),
		"multicast target":          ns(client6, group, 255, nsBody(group)),
		"zero-length option":        ns(client6, group, 255, nsBody(vip6, optSourceLL, 0, 0, 0, 0, 0, 0, 0)),
		"option past the end":       ns(client6, group, 255, nsBody(vip6, optSourceLL, 2, 0, 0, 0, 0, 0, 0)),
		"one option byte":           ns(client6, group, 255, nsBody(vip6, optSourceLL)),
		"short message":             ns(client6, group, 255, nsBody(vip6)[:19]),
		"DAD probe to all-nodes":    ns(netip.IPv6Unspecified(), allNodes, 255, nsBody(vip6)),
		"DAD probe with an option":  ns(netip.IPv6Unspecified(), group, 255, nsBody(vip6, sllOption(clientMAC)...)),
		"not ICMPv6":                mod(func(b []byte) { b[6] = 17 }),
		"IPv4":                      mod(func(b []byte) { b[0] = 4 << 4 }),
		"payload length too big":    mod(func(b []byte) { b[5]++ }),
		"no IPv6 header":            good[:39],
	} {
		if s, err := parseNS(pkt); !errors.Is(err, errNS) {
			t.Errorf("%s: parseNS = %+v, %v; want errNS", name, s, err)
		}
	}
}

func TestAdvertisementMarshal(t *testing.T) {
	na := advertisement{Src: vip6, Dst: client6, Target: vip6, Flags: naFlagSolicit | naFlagOverride, TargetLL: selfMAC}
	target := vip6.As16()
	body := append([]byte{naFlagSolicit | naFlagOverride, 0, 0, 0}, target[:]...)
	body = append(body, optTargetLL, 1)
	body = append(body, selfMAC[:]...)
	want := ipv6Packet(t, ipv6.ICMPTypeNeighborAdvertisement, vip6, client6, 255, body)
	if got := na.marshal(); !bytes.Equal(got, want) {
		t.Errorf("marshal =\n%x\nwant (x/net/icmp's checksum)\n%x", got, want)
	}
}

func TestUnsolicitedNA(t *testing.T) {
	b := unsolicitedNA(vip6, selfMAC)
	if b[7] != 255 || netip.AddrFrom16([16]byte(b[24:40])) != allNodes {
		t.Errorf("hop limit %d, destination %s; want 255 to all-nodes", b[7], netip.AddrFrom16([16]byte(b[24:40])))
	}
	m := b[ipv6HeaderLen:]
	if m[0] != icmpTypeNA || m[4] != naFlagOverride {
		t.Errorf("type %d flags %#x; want an advertisement with only O", m[0], m[4])
	}
	if icmpv6Checksum(vip6, allNodes, m) != 0 {
		t.Error("checksum does not verify")
	}
}

func TestNDPAnswer(t *testing.T) {
	group := solicitedNode(vip6)
	other := mac{0x02, 0, 0, 0, 0, 0x99}
	for _, tc := range []struct {
		name string
		s    solicitation
		from mac
		na   advertisement // zero: no answer
		to   mac
	}{{
		name: "resolution: to the source link-layer option",
		s:    solicitation{Src: client6, Dst: group, Target: vip6, SourceLL: clientMAC, HasLL: true},
		from: other,
		na:   advertisement{Src: vip6, Dst: client6, Target: vip6, Flags: naFlagSolicit | naFlagOverride, TargetLL: selfMAC},
		to:   clientMAC,
	}, {
		name: "unicast probe without option: to the frame's source",
		s:    solicitation{Src: client6, Dst: vip6, Target: vip6},
		from: clientMAC,
		na:   advertisement{Src: vip6, Dst: client6, Target: vip6, Flags: naFlagSolicit | naFlagOverride, TargetLL: selfMAC},
		to:   clientMAC,
	}, {
		name: "DAD: all-nodes, no S",
		s:    solicitation{Src: netip.IPv6Unspecified(), Dst: group, Target: vip6},
		from: clientMAC,
		na:   advertisement{Src: vip6, Dst: allNodes, Target: vip6, Flags: naFlagOverride, TargetLL: selfMAC},
		to:   allNodesMAC,
	}, {
		name: "our own frame",
		s:    solicitation{Src: client6, Dst: group, Target: vip6},
		from: selfMAC,
	}} {
		na, to, ok := ndpAnswer(tc.s, tc.from, selfMAC)
		if want := tc.na != (advertisement{}); ok != want || na != tc.na || to != tc.to {
			t.Errorf("%s: ndpAnswer = %+v to %s, %v; want %+v to %s", tc.name, na, to, ok, tc.na, tc.to)
		}
	}
}

func TestSolicitedNode(t *testing.T) {
	if got, want := solicitedNode(vip6), netip.MustParseAddr("ff02::1:ff45:6789"); got != want {
		t.Errorf("solicitedNode(%s) = %s, want %s", vip6, got, want)
	}
}

// FuzzParseNS: any input either fails with errNS or is a solicitation that passes the
// receiver checks: hop limit 255, code 0, a verifying checksum, a unicast target. With
// fix set, the input's checksum is made right first, so that mutations reach the option
// and DAD checks behind it instead of dying at the checksum.
func FuzzParseNS(f *testing.F) {
	group := solicitedNode(vip6)
	f.Add(ipv6Packet(f, ipv6.ICMPTypeNeighborSolicitation, client6, group, 255, nsBody(vip6, sllOption(clientMAC)...)), true)
	f.Add(ipv6Packet(f, ipv6.ICMPTypeNeighborSolicitation, netip.IPv6Unspecified(), group, 255, nsBody(vip6)), true)
	f.Add(ipv6Packet(f, ipv6.ICMPTypeNeighborSolicitation, client6, vip6, 255, nsBody(vip6, 14, 1, 1, 2, 3, 4, 5, 6)), false)
	f.Add(unsolicitedNA(vip6, selfMAC), false)
	f.Fuzz(func(t *testing.T, b []byte, fix bool) {
		if fix && len(b) >= ipv6HeaderLen+4 {
			plen := min(int(binary.BigEndian.Uint16(b[4:6])), len(b)-ipv6HeaderLen)
			if m := b[ipv6HeaderLen : ipv6HeaderLen+plen]; len(m) >= 4 {
				src, dst := netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
				m[2], m[3] = 0, 0
				binary.BigEndian.PutUint16(m[2:4], icmpv6Checksum(src, dst, m))
			}
		}
		s, err := parseNS(b)
		if err != nil {
			if !errors.Is(err, errNS) {
				t.Fatalf("error %v does not wrap errNS", err)
			}
			return
		}
		plen := int(binary.BigEndian.Uint16(b[4:6]))
		m := b[ipv6HeaderLen : ipv6HeaderLen+plen]
		if b[7] != 255 || m[0] != icmpTypeNS || m[1] != 0 || icmpv6Checksum(s.Src, s.Dst, m) != 0 {
			t.Fatalf("accepted %x: hop limit %d, type %d code %d", b, b[7], m[0], m[1])
		}
		if s.Target.IsMulticast() || !s.Target.Is6() {
			t.Fatalf("accepted target %s", s.Target)
		}
		if s.Src.IsUnspecified() && (s.HasLL || s.Dst != solicitedNode(s.Target)) {
			t.Fatalf("accepted a malformed DAD probe: %+v", s)
		}
	})
}
