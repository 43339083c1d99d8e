package l2

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

// optSourceLL is the source link-layer address option's type (RFC 4861 4.6.1).
const optSourceLL = 1

func sllOption(m MAC) []byte { return append([]byte{optSourceLL, 1}, m[:]...) }

func TestParseNS(t *testing.T) {
	group := SolicitedNode(vip6)
	for _, tc := range []struct {
		name string
		pkt  []byte
		want Solicitation
	}{{
		name: "address resolution",
		pkt:  ipv6Packet(t, ipv6.ICMPTypeNeighborSolicitation, client6, group, 255, nsBody(vip6, sllOption(clientMAC)...)),
		want: Solicitation{Src: client6, Dst: group, Target: vip6, SourceLL: clientMAC, HasLL: true},
	}, {
		name: "unreachability probe, unicast, no option",
		pkt:  ipv6Packet(t, ipv6.ICMPTypeNeighborSolicitation, client6, vip6, 255, nsBody(vip6)),
		want: Solicitation{Src: client6, Dst: vip6, Target: vip6},
	}, {
		name: "DAD probe",
		pkt:  ipv6Packet(t, ipv6.ICMPTypeNeighborSolicitation, netip.IPv6Unspecified(), group, 255, nsBody(vip6)),
		want: Solicitation{Src: netip.IPv6Unspecified(), Dst: group, Target: vip6},
	}, {
		name: "unknown option skipped",
		pkt:  ipv6Packet(t, ipv6.ICMPTypeNeighborSolicitation, client6, group, 255, nsBody(vip6, 14, 1, 1, 2, 3, 4, 5, 6)),
		want: Solicitation{Src: client6, Dst: group, Target: vip6},
	}} {
		got, err := parseNS(tc.pkt)
		if err != nil || got != tc.want {
			t.Errorf("%s: parseNS = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestParseNSRejects(t *testing.T) {
	group := SolicitedNode(vip6)
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
		"DAD probe to all-nodes":    ns(netip.IPv6Unspecified(), AllNodes, 255, nsBody(vip6)),
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
	const (
		flagSolicited = 0x40
		flagOverride  = 0x20
		optTargetLL   = 2
	)
	for _, tc := range []struct {
		na    Advertisement
		flags byte
	}{
		{Advertisement{Src: vip6, Dst: client6, Target: vip6, Solicited: true, Override: true, TargetLL: selfMAC}, flagSolicited | flagOverride},
		{Advertisement{Src: vip6, Dst: AllNodes, Target: vip6, Override: true, TargetLL: selfMAC}, flagOverride},
	} {
		target := vip6.As16()
		body := append([]byte{tc.flags, 0, 0, 0}, target[:]...)
		body = append(body, optTargetLL, 1)
		body = append(body, selfMAC[:]...)
		want := ipv6Packet(t, ipv6.ICMPTypeNeighborAdvertisement, tc.na.Src, tc.na.Dst, 255, body)
		got, err := marshalNA(tc.na)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("marshalNA(%+v) =\n%x, %v\nwant (x/net/icmp's checksum)\n%x", tc.na, got, err, want)
		}
		if icmpv6Checksum(tc.na.Src, tc.na.Dst, got[ipv6HeaderLen:]) != 0 {
			t.Errorf("marshalNA(%+v): checksum does not verify", tc.na)
		}
	}
}

func TestSolicitedNode(t *testing.T) {
	if got, want := SolicitedNode(vip6), netip.MustParseAddr("ff02::1:ff45:6789"); got != want {
		t.Errorf("SolicitedNode(%s) = %s, want %s", vip6, got, want)
	}
}

// FuzzParseNS: any input either fails with errNS or is a solicitation that passes the
// receiver checks: hop limit 255, code 0, a verifying checksum, a unicast target. With
// fix set, the input's checksum is made right first, so that mutations reach the option
// and DAD checks behind it instead of dying at the checksum.
func FuzzParseNS(f *testing.F) {
	group := SolicitedNode(vip6)
	f.Add(ipv6Packet(f, ipv6.ICMPTypeNeighborSolicitation, client6, group, 255, nsBody(vip6, sllOption(clientMAC)...)), true)
	f.Add(ipv6Packet(f, ipv6.ICMPTypeNeighborSolicitation, netip.IPv6Unspecified(), group, 255, nsBody(vip6)), true)
	f.Add(ipv6Packet(f, ipv6.ICMPTypeNeighborSolicitation, client6, vip6, 255, nsBody(vip6, 14, 1, 1, 2, 3, 4, 5, 6)), false)
	na, err := marshalNA(Advertisement{Src: vip6, Dst: AllNodes, Target: vip6, Override: true, TargetLL: selfMAC})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(na, false)
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
		if b[7] != 255 || m[0] != byte(ipv6.ICMPTypeNeighborSolicitation) || m[1] != 0 || icmpv6Checksum(s.Src, s.Dst, m) != 0 {
			t.Fatalf("accepted %x: hop limit %d, type %d code %d", b, b[7], m[0], m[1])
		}
		if s.Target.IsMulticast() || !s.Target.Is6() {
			t.Fatalf("accepted target %s", s.Target)
		}
		if s.Src.IsUnspecified() && (s.HasLL || s.Dst != SolicitedNode(s.Target)) {
			t.Fatalf("accepted a malformed DAD probe: %+v", s)
		}
	})
}
