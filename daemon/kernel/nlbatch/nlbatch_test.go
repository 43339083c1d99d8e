package nlbatch

import (
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TestEncodeAsksOneAck: the messages queued on Conn and added keep their order; only the
// last message before the batch end asks for an acknowledgement, none for an echo, and the
// messages are numbered in order.
func TestEncodeAsksOneAck(t *testing.T) {
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	c := b.Conn()
	tab := c.AddTable(&nftables.Table{Name: "t", Family: nftables.TableFamilyIPv4})
	ch := c.AddChain(&nftables.Chain{Name: "c", Table: tab})
	rule := netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE)},
		Data: []byte{unix.NFPROTO_IPV4, 0, 0, 0}}
	if err := b.Add(rule); err != nil {
		t.Fatal(err)
	}
	c.AddRule(&nftables.Rule{Table: tab, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}})
	msgs, err := b.take()
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 6 {
		t.Fatalf("recorded %d messages, want begin, table, chain, the added rule, a rule, end", len(msgs))
	}
	for i, want := range []string{"message type 0x10", "add table ip t", "add chain ip t c", "add a rule", "add a rule to chain ip t c", "message type 0x11"} {
		if got := Describe(msgs[i]); !strings.HasPrefix(got, want) {
			t.Errorf("message %d: %q, want %q", i, got, want)
		}
	}
	buf, last := encode(msgs)
	if last != 5 {
		t.Errorf("last = %d, want 5 (the last rule)", last)
	}
	replies, err := parseHeaders(buf)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range replies {
		if h.Sequence != uint32(i+1) {
			t.Errorf("message %d: sequence %d", i, h.Sequence)
		}
		ack := h.Flags&netlink.Acknowledge != 0
		if ack != (h.Sequence == last) {
			t.Errorf("message %d (%s): ack %v", i, Describe(msgs[i]), ack)
		}
		if h.Flags&netlink.Echo != 0 {
			t.Errorf("message %d (%s) asks for an echo", i, Describe(msgs[i]))
		}
	}
}

// parseHeaders reads back the headers encode wrote.
func parseHeaders(b []byte) ([]netlink.Header, error) {
	var out []netlink.Header
	for len(b) > 0 {
		var m netlink.Message
		n := int(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
		if err := m.UnmarshalBinary(b[:n]); err != nil {
			return nil, err
		}
		out = append(out, m.Header)
		b = b[align(n):]
	}
	return out, nil
}

// TestDescribeUnknown: messages of other subsystems are named by type.
func TestDescribeUnknown(t *testing.T) {
	if got := Describe(netlink.Message{Header: netlink.Header{Type: 0x10}}); !strings.HasPrefix(got, "message type") {
		t.Errorf("Describe = %q", got)
	}
}
