package announce

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// A request as tcpdump shows it: "Request who-has 10.77.0.1 tell 10.77.0.10".
const whoHas = "0001 0800 06 04 0001 020000000010 0a4d000a 000000000000 0a4d0001"

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	selfMAC   = mac{0x02, 0, 0, 0, 0, 0x01}
	clientMAC = mac{0x02, 0, 0, 0, 0, 0x10}
)

func TestParseARP(t *testing.T) {
	b := unhex(t, whoHas)
	want := arpPacket{
		Op:        arpRequest,
		SenderMAC: clientMAC,
		SenderIP:  netip.MustParseAddr("10.77.0.10"),
		TargetIP:  netip.MustParseAddr("10.77.0.1"),
	}
	got, err := parseARP(b)
	if err != nil || got != want {
		t.Fatalf("parseARP = %+v, %v; want %+v", got, err, want)
	}
	if m := got.marshal(); !bytes.Equal(m, b) {
		t.Errorf("marshal = %x, want %x", m, b)
	}
	// A minimum-size Ethernet frame pads the payload to 46 bytes.
	padded := append(bytes.Clone(b), make([]byte, 46-len(b))...)
	if got, err := parseARP(padded); err != nil || got != want {
		t.Errorf("padded: parseARP = %+v, %v", got, err)
	}
}

func TestParseARPRejects(t *testing.T) {
	b := unhex(t, whoHas)
	for name, mod := range map[string]func([]byte) []byte{
		"truncated":         func(b []byte) []byte { return b[:27] },
		"IEEE 802 hardware": func(b []byte) []byte { b[1] = 6; return b },
		"IPv6 protocol":     func(b []byte) []byte { b[2], b[3] = 0x86, 0xdd; return b },
		"8-byte hardware":   func(b []byte) []byte { b[4] = 8; return b },
		"16-byte protocol":  func(b []byte) []byte { b[5] = 16; return b },
	} {
		if p, err := parseARP(mod(bytes.Clone(b))); !errors.Is(err, errARP) {
			t.Errorf("%s: parseARP = %+v, %v; want errARP", name, p, err)
		}
	}
}

func TestARPAnswer(t *testing.T) {
	vip := netip.MustParseAddr("10.77.0.100")
	client := netip.MustParseAddr("10.77.0.10")
	zero := netip.IPv4Unspecified()
	for _, tc := range []struct {
		name  string
		req   arpPacket
		reply arpPacket // zero: no answer
	}{{
		name:  "request",
		req:   arpPacket{Op: arpRequest, SenderMAC: clientMAC, SenderIP: client, TargetIP: vip},
		reply: arpPacket{Op: arpReply, SenderMAC: selfMAC, SenderIP: vip, TargetMAC: clientMAC, TargetIP: client},
	}, {
		name:  "unicast probe (target MAC set)",
		req:   arpPacket{Op: arpRequest, SenderMAC: clientMAC, SenderIP: client, TargetMAC: selfMAC, TargetIP: vip},
		reply: arpPacket{Op: arpReply, SenderMAC: selfMAC, SenderIP: vip, TargetMAC: clientMAC, TargetIP: client},
	}, {
		name:  "RFC 5227 probe",
		req:   arpPacket{Op: arpRequest, SenderMAC: clientMAC, SenderIP: zero, TargetIP: vip},
		reply: arpPacket{Op: arpReply, SenderMAC: selfMAC, SenderIP: vip, TargetMAC: clientMAC, TargetIP: zero},
	}, {
		name: "another host announcing the address",
		req:  arpPacket{Op: arpRequest, SenderMAC: clientMAC, SenderIP: vip, TargetIP: vip},
	}, {
		name: "our own request",
		req:  arpPacket{Op: arpRequest, SenderMAC: selfMAC, SenderIP: client, TargetIP: vip},
	}, {
		name: "a reply",
		req:  arpPacket{Op: arpReply, SenderMAC: clientMAC, SenderIP: client, TargetIP: vip},
	}} {
		reply, to, ok := arpAnswer(tc.req, selfMAC)
		if want := tc.reply != (arpPacket{}); ok != want || reply != tc.reply {
			t.Errorf("%s: arpAnswer = %+v, %v; want %+v, %v", tc.name, reply, ok, tc.reply, want)
			continue
		}
		if ok && to != clientMAC {
			t.Errorf("%s: sent to %s, want the requester %s", tc.name, to, clientMAC)
		}
	}
}

func TestGARP(t *testing.T) {
	vip := netip.MustParseAddr("10.77.0.100")
	frames := garp(vip, selfMAC)
	if len(frames) != 2 {
		t.Fatalf("%d frames, want a request and a reply", len(frames))
	}
	want := []arpPacket{
		{Op: arpRequest, SenderMAC: selfMAC, SenderIP: vip, TargetIP: vip},
		{Op: arpReply, SenderMAC: selfMAC, SenderIP: vip, TargetMAC: selfMAC, TargetIP: vip},
	}
	for i, b := range frames {
		if p, err := parseARP(b); err != nil || p != want[i] {
			t.Errorf("frame %d = %+v, %v; want %+v", i, p, err, want[i])
		}
	}
}

func TestMarshalNonIPv4(t *testing.T) {
	b := arpPacket{Op: arpReply, SenderIP: netip.MustParseAddr("2001:db8::1")}.marshal()
	if p, err := parseARP(b); err != nil || p.SenderIP != netip.IPv4Unspecified() || p.TargetIP != netip.IPv4Unspecified() {
		t.Errorf("parse(marshal) = %+v, %v; want 0.0.0.0 for both addresses", p, err)
	}
}

// FuzzParseARP: any input either fails with errARP or decodes to a packet whose encoding
// is the input's first 28 bytes.
func FuzzParseARP(f *testing.F) {
	f.Add(unhex(f, whoHas))
	for _, b := range garp(netip.MustParseAddr("192.0.2.1"), selfMAC) {
		f.Add(b)
	}
	f.Add(make([]byte, 46))
	f.Add([]byte{0, 1, 8, 0, 6, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseARP(b)
		if err != nil {
			if !errors.Is(err, errARP) {
				t.Fatalf("error %v does not wrap errARP", err)
			}
			return
		}
		if !p.SenderIP.Is4() || !p.TargetIP.Is4() {
			t.Fatalf("decoded non-IPv4 addresses: %+v", p)
		}
		if m := p.marshal(); !bytes.Equal(m, b[:arpLen]) {
			t.Fatalf("marshal(parse(%x)) = %x", b, m)
		}
	})
}
