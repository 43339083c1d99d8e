package l2

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
	selfMAC   = MAC{0x02, 0, 0, 0, 0, 0x01}
	clientMAC = MAC{0x02, 0, 0, 0, 0, 0x10}
)

func TestParseARP(t *testing.T) {
	b := unhex(t, whoHas)
	want := ARP{
		Op:        ARPRequest,
		SenderMAC: clientMAC,
		SenderIP:  netip.MustParseAddr("10.77.0.10"),
		TargetIP:  netip.MustParseAddr("10.77.0.1"),
	}
	got, err := parseARP(b)
	if err != nil || got != want {
		t.Fatalf("parseARP = %+v, %v; want %+v", got, err, want)
	}
	if m := marshalARP(got); !bytes.Equal(m, b) {
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

func TestMarshalNonIPv4(t *testing.T) {
	b := marshalARP(ARP{Op: ARPReply, SenderIP: netip.MustParseAddr("2001:db8::1")})
	if p, err := parseARP(b); err != nil || p.SenderIP != netip.IPv4Unspecified() || p.TargetIP != netip.IPv4Unspecified() {
		t.Errorf("parse(marshal) = %+v, %v; want 0.0.0.0 for both addresses", p, err)
	}
}

// FuzzParseARP: any input either fails with errARP or decodes to a packet whose encoding
// is the input's first 28 bytes.
func FuzzParseARP(f *testing.F) {
	f.Add(unhex(f, whoHas))
	ip := netip.MustParseAddr("192.0.2.1")
	f.Add(marshalARP(ARP{Op: ARPRequest, SenderMAC: selfMAC, SenderIP: ip, TargetIP: ip}))
	f.Add(marshalARP(ARP{Op: ARPReply, SenderMAC: selfMAC, SenderIP: ip, TargetMAC: selfMAC, TargetIP: ip}))
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
		if m := marshalARP(p); !bytes.Equal(m, b[:arpLen]) {
			t.Fatalf("marshal(parse(%x)) = %x", b, m)
		}
	})
}
