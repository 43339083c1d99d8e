package nlbatch

import (
	"encoding/binary"
	"fmt"
	"slices"
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
	if msgs.n != 6 {
		t.Fatalf("recorded %d messages, want begin, table, chain, the added rule, a rule, end", msgs.n)
	}
	for i, want := range []string{"message type 0x10", "add table ip t", "add chain ip t c", "add a rule", "add a rule to chain ip t c", "message type 0x11"} {
		if m := msgs.message(uint32(i + 1)); m == nil || !strings.HasPrefix(Describe(*m), want) {
			t.Errorf("message %d: %v, want %q", i+1, m, want)
		}
	}
	if last := msgs.last(); last != 5 {
		t.Errorf("last = %d, want 5 (the last rule)", last)
	}
	headers, err := parseHeaders(slices.Concat(msgs.chunks...))
	if err != nil {
		t.Fatal(err)
	}
	if len(headers) != 6 {
		t.Fatalf("%d messages laid out, want 6", len(headers))
	}
	for i, h := range headers {
		if h.Sequence != uint32(i+1) {
			t.Errorf("message %d: sequence %d", i, h.Sequence)
		}
		ack := h.Flags&netlink.Acknowledge != 0
		if ack != (h.Sequence == msgs.last()) {
			t.Errorf("message %d: ack %v", i+1, ack)
		}
		if h.Flags&netlink.Echo != 0 {
			t.Errorf("message %d asks for an echo", i+1)
		}
	}
}

// TestEncodeInChunks: a large batch is laid out in growing chunks, few enough for one
// sendmsg, and reads back message by message in order.
func TestEncodeInChunks(t *testing.T) {
	var e encoded
	data := make([]byte, 1001) // not a multiple of 4: padded
	const count = 40000
	for i := range count {
		data[0] = byte(i)
		e.write(netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWRULE), netlink.Request, data)
	}
	e.end()
	if e.n != count+2 {
		t.Fatalf("%d messages, want %d", e.n, count+2)
	}
	if len(e.chunks) < 2 || len(e.chunks) > maxChunks {
		t.Errorf("%d chunks", len(e.chunks))
	}
	total := 0
	for _, c := range e.chunks {
		total += len(c)
		if cap(c) > maxChunk {
			t.Errorf("a chunk of %d bytes", cap(c))
		}
	}
	if total != e.size || total != count*1020+2*20 {
		t.Errorf("size %d, chunks hold %d, want %d", e.size, total, count*1020+2*20)
	}
	headers, err := parseHeaders(slices.Concat(e.chunks...))
	if err != nil || len(headers) != count+2 {
		t.Fatalf("%d headers, %v", len(headers), err)
	}
	for _, seq := range []uint32{2, 777, count + 1} {
		m := e.message(seq)
		if m == nil || len(m.Data) != len(data) || m.Data[0] != byte(seq-2) {
			t.Errorf("message %d: %v", seq, m)
		}
	}
	if e.message(count+3) != nil {
		t.Error("a message past the end")
	}
}

// parseHeaders reads back the headers of the messages laid out in b.
func parseHeaders(b []byte) ([]netlink.Header, error) {
	var out []netlink.Header
	for len(b) > 0 {
		if len(b) < 16 {
			return nil, fmt.Errorf("%d bytes left, not a header", len(b))
		}
		n := int(binary.NativeEndian.Uint32(b))
		if n < 16 || align(n) > len(b) {
			return nil, fmt.Errorf("message of %d bytes with %d left", n, len(b))
		}
		out = append(out, netlink.Header{Length: uint32(n), Type: netlink.HeaderType(binary.NativeEndian.Uint16(b[4:])),
			Flags: netlink.HeaderFlags(binary.NativeEndian.Uint16(b[6:])), Sequence: binary.NativeEndian.Uint32(b[8:])})
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
